// Cooperative-matrix fragments of the float16 x float16 + float32 kernels (gemm.comp's
// coopmat path, attention_coopmat.comp): subgroup-scoped, operands staged in shared memory as
// 16-byte words of eight halves. The including kernel enables GL_KHR_cooperative_matrix,
// GL_KHR_memory_scope_semantics and the 16-bit types (extensions must precede any code).
// vkumd/compiler/kernels/coopmat.py is the host's side of what both share.
#pragma once

// An M x K float16 A operand, a K x N float16 B operand, an M x N float32 accumulator, and an
// M x N float16 accumulator (a float32 one converted for a float16 store or load).
#define COOPMAT_A(M, K) coopmat<float16_t, gl_ScopeSubgroup, M, K, gl_MatrixUseA>
#define COOPMAT_B(K, N) coopmat<float16_t, gl_ScopeSubgroup, K, N, gl_MatrixUseB>
#define COOPMAT_ACC(M, N) coopmat<float, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator>
#define COOPMAT_ACC16(M, N) coopmat<float16_t, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator>
