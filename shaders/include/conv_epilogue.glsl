// The convolution kernels' epilogue (conv2d.comp, conv2d_depthwise.comp): the activation
// (activation.glsl's codes, with two parameters) and the residual, added after the activation
// (RESIDUAL_AFTER) or before it (RESIDUAL_BEFORE); the bias is in the accumulator already.
// Needs pc.act, pc.act_p0, pc.act_p1, pc.residual_mode and a buffer `residual` of ELEM read
// through TO_F. Codes: vkumd.compiler.kernels.limits.RESIDUAL_*.
#pragma once
#include "activation.glsl"

#define CONV_RESIDUAL_AFTER 1u
#define CONV_RESIDUAL_BEFORE 2u

float conv_finish(float acc, uint index) {
    if (pc.residual_mode == CONV_RESIDUAL_BEFORE) {
        acc += TO_F(residual[index]);
    }
    float v = vkumd_activate_params(pc.act, acc, pc.act_p0, pc.act_p1);
    if (pc.residual_mode == CONV_RESIDUAL_AFTER) {
        v += TO_F(residual[index]);
    }
    return v;
}
