"""Every op vkumd knows, declared once: one module per op family, one
:func:`~vkumd.framework.graph.registry.define` call per op.

A record holds the op's inputs and attributes, its shape and dtype rule, its float64
reference, its traits (how it joins a generated elementwise kernel, whether it is a GEMM
epilogue, which inputs it may overwrite) and how it runs (its lowering to launches, the nodes
its kernels refuse, a host fallback, its public ``vkumd.ops`` function). The graph, the
executors, the interpreter, the frontends and the tests read these records; nothing else
lists ops. ``docs/extending.md`` walks through adding one.

Importing this package declares them all; ``vkumd.framework.ops`` does so on import.
"""

from vkumd.framework.opset import (  # noqa: F401  (importing declares the ops)
    activation,
    activation_params,
    any_all,
    argmax,
    arith,
    attention,
    batch_norm,
    bitcast,
    bitwise,
    compare,
    conv,
    conv_transpose,
    extremum,
    fused,
    gathers,
    generation,
    grid_sample,
    host_steps,
    kv_cache,
    layout,
    log_softmax,
    losses,
    lrn,
    matmul,
    norms,
    pool,
    qlinear,
    quantized,
    recurrent,
    reductions,
    resample,
    rotary,
    scan,
    scatters,
    softmax,
    topk,
    unary,
    unary_math,
    windows,
)
