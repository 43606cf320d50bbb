#version 450
// out = act(x) elementwise, act one of activation.glsl's codes (specialization constant
// ACT), computed in float32 and rounded once to the storage type. With VEC 4 each
// invocation handles four elements (the count must be a multiple of 4).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#define SUBGROUP_REDUCE 0
#include "rows.glsl"
#include "activation.glsl"

layout(constant_id = 1) const uint ACT = 0u;

layout(std430, binding = 0) readonly buffer X { UNIT x[]; };
layout(std430, binding = 1) writeonly buffer Out { UNIT result[]; };

layout(push_constant) uniform Shape {
    uint units;  // elements / VEC
} pc;

void main() {
    uint row_width = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint index = gl_GlobalInvocationID.y * row_width + gl_GlobalInvocationID.x;
    if (index >= pc.units) {
        return;
    }
    VT v = UNIT_TO_F(x[index]);
#if VEC == 4
    v = vec4(vkumd_activate(ACT, v.x), vkumd_activate(ACT, v.y), vkumd_activate(ACT, v.z),
             vkumd_activate(ACT, v.w));
#else
    v = vkumd_activate(ACT, v);
#endif
    result[index] = F_TO_UNIT(v);
}
