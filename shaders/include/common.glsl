// Shared helpers for vkumd compute kernels. Included with #include "common.glsl".
#pragma once

// Threads per workgroup along x unless a kernel variant overrides it with a define.
#ifndef VKUMD_WORKGROUP_SIZE
#define VKUMD_WORKGROUP_SIZE 64
#endif

// Ceiling division for sizing loops over tiles.
#define VKUMD_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// Grid-stride loops: invocation VKUMD_FIRST_INDEX handles that element, then every
// VKUMD_THREAD_COUNT-th one. The host caps the grid (few large workgroups on CPU drivers,
// whose cost is per workgroup), and consecutive lanes touch consecutive elements.
// Macros, not functions: glslang sizes gl_WorkGroupSize as 1 in code that comes before the
// shader's `layout(local_size_x_id = 0) in;`, and this file is included above it.
#define VKUMD_THREAD_COUNT (gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y)
#define VKUMD_FIRST_INDEX (gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x) \
                           + gl_GlobalInvocationID.x)
