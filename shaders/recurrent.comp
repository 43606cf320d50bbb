#version 450
// One time step of an LSTM, GRU or simple RNN layer, every direction at once: the gates from this step's
// rows of the input projection xw (one GEMM over every step, run before), the recurrent
// projection hr (this step's GEMM), the biases and the peepholes, then the cell update.
// One invocation per (direction, batch row, hidden unit), grid-stride.
//
// The state lives in the outputs y_h and y_c: each invocation reads and writes only its own
// element of them, so the update runs in place and the next step's GEMM reads y_h directly.
// The first step reads initial_h / initial_c instead (or zeros when they are absent).
//
// MODE 1 LSTM (gates i, o, f, c: ONNX's order); MODE 2 GRU with linear_before_reset (the
// reset gate scales h.Rh^T + Rbh, so one GEMM of h against all of R serves the step);
// MODE 3 and 4 GRU without it, whose candidate needs (r * h).Rh^T: MODE 3 writes r * h_prev
// (into the y_c slot), the planner's GEMM multiplies it by Rh, and MODE 4 finishes the step
// with that product in hr2. MODE 5 is ONNX's RNN (one gate: h = f(x.Wi^T + h.Ri^T + Wbi +
// Rbi)), whose activation f per direction (tanh, relu or sigmoid) is in the flags' bits 8-11.
// LSTM's and GRU's activations are ONNX's defaults (sigmoid, tanh, tanh); `clip` bounds
// every activation's input, as onnxruntime does.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"
#include "elementwise_types.glsl"
#include "activation.glsl"

#ifndef DTYPE
#define DTYPE F32
#endif
#if DTYPE == F32
#define ELEM float
#elif DTYPE == F16
#define ELEM float16_t
#else
#error "DTYPE must be F32 or F16"
#endif

#define LSTM 1
#define GRU_LINEAR 2
#define GRU_RESET 3
#define GRU_CELL 4
#define RNN 5
#ifndef MODE
#define MODE LSTM
#endif
#if MODE == LSTM
#define GATES 4u
#elif MODE == RNN
#define GATES 1u
#else
#define GATES 3u
#endif

// flags
#define HAS_BIAS 1u
#define HAS_PEEPHOLES 2u
#define HAS_H0 4u
#define HAS_C0 8u
#define HAS_HR 16u      // hr (and hr2) hold this step's recurrent product; else it is zero
#define INPUT_FORGET 32u
#define CLIP 64u
#define HAS_LENS 128u   // lens holds each batch row's sequence length
#define ACTIVATION_SHIFT 8u  // RNN: 2 bits per direction, 0 tanh, 1 relu, 2 sigmoid

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer XW { ELEM xw[]; };   // [seq, batch, dirs*G*H]
layout(std430, binding = 1) readonly buffer HR { ELEM hr[]; };   // [dirs, batch, hr_cols]
layout(std430, binding = 2) readonly buffer HR2 { ELEM hr2[]; }; // [dirs, batch, H] (MODE 4)
layout(std430, binding = 3) readonly buffer B { ELEM bias[]; };  // [dirs, 2*G*H]: Wb then Rb
layout(std430, binding = 4) readonly buffer P { ELEM peep[]; };  // [dirs, 3*H]: i, o, f
layout(std430, binding = 5) readonly buffer H0 { ELEM h0[]; };   // [dirs, batch, H]
layout(std430, binding = 6) readonly buffer C0 { ELEM c0[]; };   // [dirs, batch, H]
layout(std430, binding = 7) buffer Y { ELEM y[]; };              // [seq, dirs, batch, H]
layout(std430, binding = 8) buffer YH { ELEM y_h[]; };           // [dirs, batch, H]
layout(std430, binding = 9) buffer YC { ELEM y_c[]; };           // [dirs, batch, H]; MODE 3: r*h
layout(std430, binding = 10) readonly buffer Lens { int lens[]; }; // [batch] sequence_lens

layout(push_constant) uniform Recurrent {
    uint seq;
    uint batch;
    uint hidden;
    uint dirs;
    uint step;
    uint reverse;   // bit d: direction d walks the sequence backwards
    uint hr_cols;   // columns of a row of hr
    uint flags;
    float clip;
} pc;

float bounded(float v) {
    return (pc.flags & CLIP) != 0u ? clamp(v, -pc.clip, pc.clip) : v;
}

void main() {
    uint hidden = pc.hidden;
    uint total = pc.dirs * pc.batch * hidden;
    uint gh = GATES * hidden;
    bool first = pc.step == 0u;
    bool has_hr = (pc.flags & HAS_HR) != 0u;
    bool has_bias = (pc.flags & HAS_BIAS) != 0u;
    for (uint index = VKUMD_FIRST_INDEX; index < total; index += VKUMD_THREAD_COUNT) {
        uint j = index % hidden;
        uint row = index / hidden;           // d * batch + b: the state's row
        uint b = row % pc.batch;
        uint d = row / pc.batch;
        // With sequence_lens, row b runs its first len steps (a backward direction from
        // step len - 1 down); its later steps write zeros to Y and keep the state.
        uint len = pc.seq;
        if ((pc.flags & HAS_LENS) != 0u) {
            len = min(uint(max(lens[b], 0)), pc.seq);
        }
        bool running = pc.step < len;
        uint t = running && ((pc.reverse >> d) & 1u) != 0u ? len - 1u - pc.step : pc.step;
        float h_prev = first ? ((pc.flags & HAS_H0) != 0u ? float(h0[index]) : 0.0)
                             : float(y_h[index]);
        uint at = (t * pc.dirs + d) * pc.batch * hidden + b * hidden + j;
#if MODE == LSTM
        float c_prev = first ? ((pc.flags & HAS_C0) != 0u ? float(c0[index]) : 0.0)
                             : float(y_c[index]);
#endif
        if (!running) {
#if MODE != GRU_RESET
            y[at] = ELEM(0.0);
            y_h[index] = ELEM(h_prev);
#if MODE == LSTM
            y_c[index] = ELEM(c_prev);
#endif
#endif
            continue;
        }
        uint xbase = (t * pc.batch + b) * (pc.dirs * gh) + d * gh + j;
        uint hbase = row * pc.hr_cols + j;
        uint bbase = d * 2u * gh + j;
        // gate g's input: x.W^T + h.R^T + Wb + Rb (the hr term zero before any state).
        float pre[GATES];
        for (uint g = 0u; g < GATES; ++g) {
            float v = float(xw[xbase + g * hidden]);
            if (has_bias) {
                v += float(bias[bbase + g * hidden]);
#if MODE == LSTM
                v += float(bias[bbase + gh + g * hidden]);
#else
                // GRU's Rbh belongs with the recurrent term of the candidate: added below.
                if (g < 2u) {
                    v += float(bias[bbase + gh + g * hidden]);
                }
#endif
            }
            // GRU's candidate takes its recurrent term below (scaled by r, or as hr2).
            if (has_hr && (MODE == LSTM || g < 2u)) {
                v += float(hr[hbase + g * hidden]);
            }
            pre[g] = v;
        }
#if MODE == LSTM
        bool peep_on = (pc.flags & HAS_PEEPHOLES) != 0u;
        uint pbase = d * 3u * hidden + j;
        float pi = pre[0];
        float pf = pre[2];
        if (peep_on) {
            pi += float(peep[pbase]) * c_prev;
            pf += float(peep[pbase + 2u * hidden]) * c_prev;
        }
        float gi = vkumd_sigmoid(bounded(pi));
        float gf = (pc.flags & INPUT_FORGET) != 0u ? 1.0 - gi : vkumd_sigmoid(bounded(pf));
        float gc = vkumd_tanh(bounded(pre[3]));
        float c = gf * c_prev + gi * gc;
        float po = pre[1];
        if (peep_on) {
            po += float(peep[pbase + hidden]) * c;
        }
        float h = vkumd_sigmoid(bounded(po)) * vkumd_tanh(c);
        y_c[index] = ELEM(c);
        y_h[index] = ELEM(h);
        y[at] = ELEM(h);
#elif MODE == RNN
        // pre[0] holds both biases: the GRU path's "g < 2" adds Rb to gate 0.
        uint act = (pc.flags >> (ACTIVATION_SHIFT + 2u * d)) & 3u;
        float v = bounded(pre[0]);
        float h = act == 0u ? vkumd_tanh(v) : (act == 1u ? max(v, 0.0) : vkumd_sigmoid(v));
        y_h[index] = ELEM(h);
        y[at] = ELEM(h);
#elif MODE == GRU_RESET
        float r = vkumd_sigmoid(bounded(pre[1]));
        y_c[index] = ELEM(r * h_prev);
#else
        float z = vkumd_sigmoid(bounded(pre[0]));
        float rb = has_bias ? float(bias[bbase + gh + 2u * hidden]) : 0.0;
#if MODE == GRU_LINEAR
        float r = vkumd_sigmoid(bounded(pre[1]));
        float rec = has_hr ? float(hr[hbase + 2u * hidden]) : 0.0;
        float n = vkumd_tanh(bounded(pre[2] + r * (rec + rb)));
#else
        float rec = has_hr ? float(hr2[index]) : 0.0;
        float n = vkumd_tanh(bounded(pre[2] + rec + rb));
#endif
        float h = (1.0 - z) * n + z * h_prev;
        y_h[index] = ELEM(h);
        y[at] = ELEM(h);
#endif
    }
}
