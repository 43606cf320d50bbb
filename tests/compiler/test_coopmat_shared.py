"""GEMM's and attention's cooperative-matrix kernels pick shapes and check block configs
with one set of rules (kernels/coopmat.py), and declare fragments with one include."""

from __future__ import annotations

import dataclasses

from test_spirv_val import fake_devices

from vkumd.compiler.kernels.attention import coopmat_shapes
from vkumd.compiler.kernels.coopmat import (
    ranked_shapes,
    shared_memory_problem,
    workgroup_problem,
)
from vkumd.compiler.kernels.gemm import usable_coopmat_shape
from vkumd.compiler.registry import KERNELS
from vkumd.vk.caps import CoopMatShape


def shape(m: int, n: int, k: int) -> CoopMatShape:
    return CoopMatShape(m, n, k, "float16", "float16", "float32", "float32", "subgroup")


def test_the_preferred_shape_first_then_the_largest_in_the_drivers_order() -> None:
    listed = [shape(8, 8, 8), shape(16, 8, 16), shape(8, 16, 16), shape(16, 16, 16)]
    assert ranked_shapes(listed, lambda s: True) == [listed[3], listed[1], listed[2], listed[0]]
    assert ranked_shapes(listed[:3], lambda s: s.m == 8) == [listed[2], listed[0]]


def test_gemm_and_attention_pick_the_same_shape_where_both_can_use_it() -> None:
    caps = dataclasses.replace(fake_devices()[0], subgroup_size=16, min_subgroup_size=16,
                               max_subgroup_size=16)
    listed = (shape(16, 8, 16), shape(8, 8, 8), shape(16, 16, 16))
    caps = dataclasses.replace(caps, cooperative_matrix_shapes=listed)
    assert usable_coopmat_shape(list(listed)) == coopmat_shapes(caps)[0] == listed[2]
    without = dataclasses.replace(caps, cooperative_matrix_shapes=listed[:2])
    assert usable_coopmat_shape(list(listed[:2])) == coopmat_shapes(without)[0] == listed[0]


def test_workgroup_and_shared_memory_limits_name_the_device() -> None:
    caps = fake_devices()[0]
    most = min(caps.max_workgroup_invocations, caps.max_workgroup_size[0]) // caps.subgroup_size
    assert workgroup_problem(caps, "1", 1) is None
    assert caps.name in workgroup_problem(caps, f"{most + 1}", most + 1)
    assert shared_memory_problem(caps, caps.shared_memory_size) is None
    message = shared_memory_problem(caps, caps.shared_memory_size + 1, " at head_dim 64")
    assert "at head_dim 64" in message and caps.name in message


def test_both_kernels_declare_their_fragments_with_the_shared_include() -> None:
    for name in ("gemm", "attention_coopmat"):
        text = KERNELS[name].source_text()
        assert '#include "coopmat.glsl"' in text
        assert "gl_MatrixUse" not in text, f"{name} spells a fragment type out"
