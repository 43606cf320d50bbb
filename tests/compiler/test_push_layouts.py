"""Each kernel's Python push-constant layout matches the block its shader declares.

Every shipped kernel is compiled for each distinct define set its variants use (on the
made-up devices with every capability, so coopmat paths are covered too) and the SPIR-V's
push-constant members -- names, ``Offset`` decorations and sizes -- are compared with the
kernel's :class:`~vkumd.compiler.push.PushLayout`. Parametrized over the registry, so a new
kernel is covered unedited.
"""

from __future__ import annotations

import pytest
from spirv_reflect import BlockMember, push_block
from test_spirv_val import TARGET_ENV, fake_devices, split_variant

from vkumd.compiler import kernels as _shipped  # noqa: F401 - registers the shipped kernels
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import KERNELS
from vkumd.compiler.spirv_cache import SpirvCache
from vkumd.errors import VkumdValueError

SHIPPED = sorted(KERNELS)


@pytest.fixture(scope="module")
def spirv_cache(tmp_path_factory: pytest.TempPathFactory) -> SpirvCache:
    return SpirvCache(tmp_path_factory.mktemp("push-layout-cache"))


def expected(layout: PushLayout) -> list[BlockMember]:
    return [BlockMember(m.name, m.offset, m.size) for m in layout.members]


@pytest.mark.parametrize("name", SHIPPED)
def test_layout_matches_the_shader(name: str, spirv_cache: SpirvCache) -> None:
    kernel = KERNELS[name]
    define_sets = {}
    for caps in fake_devices():
        for variant in kernel.variants(caps):
            defines = split_variant(kernel, variant)
            define_sets[tuple(sorted((k, str(v)) for k, v in defines.items()))] = defines
    assert define_sets, f"{name} has no variant even on a device with every capability"
    want = expected(kernel.push)
    for defines in define_sets.values():
        spirv = spirv_cache.get_or_compile(kernel.source_text(), name=kernel.source,
                                           defines=defines, target_env=TARGET_ENV)
        got = push_block(spirv)
        assert got == want, (f"{name} with {defines}: the shader's push block is {got}, the "
                             f"kernel declares {want}")


def test_a_layout_that_disagrees_is_caught(spirv_cache: SpirvCache) -> None:
    """The comparison itself can fail: a layout with two members swapped does not match."""
    kernel = KERNELS["norm"]
    spirv = spirv_cache.get_or_compile(kernel.source_text(), name=kernel.source,
                                       defines={"DTYPE": "F32", "VEC": 1, "SUBGROUP_REDUCE": 1},
                                       target_env=TARGET_ENV)
    swapped = PushLayout("rows:u32", "cols:u32", "eps:f32", "flags:u32")
    assert push_block(spirv) == expected(kernel.push)
    assert push_block(spirv) != expected(swapped)


def test_layout_refuses_misaligned_and_malformed_members() -> None:
    with pytest.raises(VkumdValueError, match="alignment"):
        PushLayout("n:u32", "address:u64")
    with pytest.raises(VkumdValueError, match="name:type"):
        PushLayout("n:uint32")
    with pytest.raises(VkumdValueError, match="twice"):
        PushLayout("n:u32", "n:u32")


def test_layout_packs_in_member_order() -> None:
    layout = PushLayout("a:u64", "n:u32", "shape:u32[2]", "scale:f32", "offset:i32")
    assert layout.size == 8 + 4 + 8 + 4 + 4
    assert layout.offset("scale") == 20
    packed = layout.pack(1, 2, 3, 4, 0.5, -1)
    assert len(packed) == layout.size
    assert packed[:8] == (1).to_bytes(8, "little")
    assert packed[-4:] == (-1).to_bytes(4, "little", signed=True)
