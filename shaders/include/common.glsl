// Shared helpers for vkumd compute kernels. Included with #include "common.glsl".
#pragma once

// Threads per workgroup along x unless a kernel variant overrides it with a define.
#ifndef VKUMD_WORKGROUP_SIZE
#define VKUMD_WORKGROUP_SIZE 64
#endif

// Ceiling division for sizing loops over tiles.
#define VKUMD_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
