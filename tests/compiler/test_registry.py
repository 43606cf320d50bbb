"""The kernel registry: argument checks, capability checks, memoised programs, shared layouts."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import vkumd
from vkumd.cli import main
from vkumd.compiler.kernels import ELEMENTWISE_BINARY
from vkumd.compiler.program import LayoutSignature
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import KERNELS, Kernel, effective_caps, register
from vkumd.compiler.spirv_cache import default_cache
from vkumd.errors import CapabilityMissing, VkumdValueError
from vkumd.framework.ops import add

NAME = ELEMENTWISE_BINARY.name


@pytest.fixture
def variants(ctx: vkumd.Context) -> list[dict]:
    """The elementwise kernel's own variants for this device (whatever its defines are)."""
    found = ELEMENTWISE_BINARY.variants(ctx.caps)
    assert len(found) >= 2
    return found


@pytest.fixture
def throwaway() -> Iterator[list[str]]:
    """Register test-only kernels; they leave :data:`KERNELS` when the test ends."""
    names: list[str] = []
    try:
        yield names
    finally:
        for name in names:
            KERNELS.pop(name, None)


def _add_throwaway(names: list[str], name: str, **fields: object) -> Kernel:
    kernel = Kernel(name=name, source=ELEMENTWISE_BINARY.source, buffers=ELEMENTWISE_BINARY.buffers,
                    push=ELEMENTWISE_BINARY.push,
                    defines=ELEMENTWISE_BINARY.defines,
                    spec_constants=ELEMENTWISE_BINARY.spec_constants, **fields)
    register(kernel)
    names.append(name)
    return kernel


def _still_usable(context: vkumd.Context) -> None:
    a = np.linspace(-1, 1, 33, dtype=np.float32)
    out = add(context.tensor(a), context.tensor(a)).numpy()
    np.testing.assert_array_equal(out, a + a)


def test_unknown_kernel(ctx: vkumd.Context) -> None:
    with pytest.raises(VkumdValueError, match="no_such_kernel") as info:
        ctx.kernels.program("no_such_kernel")
    assert NAME in str(info.value), "the message should list the known kernels"


def test_unknown_define(ctx: vkumd.Context, variants: list[dict]) -> None:
    with pytest.raises(VkumdValueError, match="BOGUS_DEFINE") as info:
        ctx.kernels.program(NAME, {**variants[0], "BOGUS_DEFINE": 1})
    text = str(info.value)
    assert NAME in text
    for accepted in [*ELEMENTWISE_BINARY.defines, *ELEMENTWISE_BINARY.spec_constants]:
        assert accepted in text, "the message should list what the kernel accepts"


def test_disallowed_define_value(ctx: vkumd.Context, variants: list[dict]) -> None:
    restricted = {k: v for k, v in ELEMENTWISE_BINARY.defines.items() if v}
    assert restricted, "the elementwise kernel no longer restricts any define"
    define, allowed = next(iter(restricted.items()))
    with pytest.raises(VkumdValueError, match=f"{define}='not_a_value'") as info:
        ctx.kernels.program(NAME, {**variants[0], define: "not_a_value"})
    assert all(repr(value) in str(info.value) for value in allowed), \
        "the message should list the allowed values"


def test_registering_twice_is_refused() -> None:
    with pytest.raises(VkumdValueError, match="twice"):
        register(ELEMENTWISE_BINARY)
    assert KERNELS[NAME] is ELEMENTWISE_BINARY


def test_missing_coopmat(ctx: vkumd.Context, throwaway: list[str],
                        variants: list[dict]) -> None:
    if "coopmat" in effective_caps(ctx.caps):
        pytest.skip(f"{ctx.caps.name} has cooperative matrices")
    kernel = _add_throwaway(throwaway, "_test_needs_coopmat", requires=frozenset({"coopmat"}))
    before = len(ctx.kernels)
    assert not ctx.kernels.supports(kernel)
    with pytest.raises(CapabilityMissing, match="coopmat") as info:
        ctx.kernels.program(kernel.name, variants[0])
    assert kernel.name in str(info.value) and ctx.caps.name in str(info.value)
    assert len(ctx.kernels) == before
    _still_usable(ctx)


def test_fp16_opt_out(ctx: vkumd.Context, throwaway: list[str], variants: list[dict],
                      monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = _add_throwaway(throwaway, "_test_needs_fp16", requires=frozenset({"float16"}))
    monkeypatch.setenv("VKUMD_DISABLE_FP16", "1")
    assert "float16" not in effective_caps(ctx.caps)
    with pytest.raises(CapabilityMissing, match="float16.*VKUMD_DISABLE"):
        ctx.kernels.program(kernel.name, variants[0])
    _still_usable(ctx)
    if not ctx.caps.shader_float16:
        return
    monkeypatch.delenv("VKUMD_DISABLE_FP16")
    assert ctx.kernels.program(kernel.name, variants[0]) is not None


def test_coopmat_opt_out(ctx: vkumd.Context, monkeypatch: pytest.MonkeyPatch) -> None:
    with_coopmat = dataclasses.replace(ctx.caps, cooperative_matrix=True)
    monkeypatch.delenv("VKUMD_DISABLE_COOPMAT", raising=False)
    assert "coopmat" in effective_caps(with_coopmat)
    monkeypatch.setenv("VKUMD_DISABLE_COOPMAT", "1")
    assert "coopmat" not in effective_caps(with_coopmat)


def test_programs_are_memoised(ctx: vkumd.Context, variants: list[dict]) -> None:
    first = ctx.kernels.program(NAME, variants[0])
    assert ctx.kernels.program(NAME, dict(variants[0])) is first
    # Key order does not make a new pipeline.
    reordered = dict(reversed(list(variants[0].items())))
    assert ctx.kernels.program(NAME, reordered) is first
    other = ctx.kernels.program(NAME, variants[1])
    assert other is not first
    assert ctx.kernels.program(NAME, dict(variants[1])) is other


def test_layouts_shared_by_signature(ctx: vkumd.Context, throwaway: list[str],
                                     variants: list[dict]) -> None:
    registry = ctx.kernels
    first = registry.program(NAME, variants[0])
    layouts = len(registry.layouts)
    # Another kernel with the same bindings and push block reuses the layout ...
    _add_throwaway(throwaway, "_test_same_signature")
    same = registry.program("_test_same_signature", variants[0])
    assert same is not first
    assert same.layout is first.layout
    assert len(registry.layouts) == layouts
    # ... and a different push-constant size gets its own.
    base = ELEMENTWISE_BINARY
    throwaway.append("_test_other_signature")
    register(dataclasses.replace(base, name="_test_other_signature",
                                 push=PushLayout(*(f"{m.name}:{m.type}"
                                                   + (f"[{m.count}]" if m.count > 1 else "")
                                                   for m in base.push.members),
                                                 "extra:u32[4]")))
    other = registry.program("_test_other_signature", variants[0])
    assert other.layout is not first.layout
    assert other.layout.signature == LayoutSignature(base.buffers, base.push_bytes + 16,
                                                     registry.push_descriptors)
    assert len(registry.layouts) == layouts + 1


def test_compile_all_reports_skipped(ctx: vkumd.Context, throwaway: list[str]) -> None:
    if "coopmat" in effective_caps(ctx.caps):
        pytest.skip(f"{ctx.caps.name} has cooperative matrices")
    _add_throwaway(throwaway, "_test_skipped", requires=frozenset({"coopmat"}))
    seen: list[tuple[int, int, str]] = []
    summary = ctx.kernels.compile_all(lambda done, total, name: seen.append((done, total, name)))
    assert "_test_skipped" in summary.skipped
    assert summary.programs == len(seen) > 0
    assert [done for done, _, _ in seen] == list(range(1, len(seen) + 1))
    assert all(total == len(seen) for _, total, _ in seen)
    assert "_test_skipped" not in {name for _, _, name in seen}
    # Everything is memoised now: a second pass builds nothing new.
    again = ctx.kernels.compile_all()
    assert again.programs == summary.programs
    assert (again.spirv_hits, again.spirv_misses) == (0, 0)


def test_cli_compile_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str], throwaway: list[str]) -> None:
    monkeypatch.setenv("VKUMD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VKUMD_DISABLE_FP16", "1")
    _add_throwaway(throwaway, "_test_cli_needs_fp16", requires=frozenset({"float16"}))
    default_cache().clear_memory()  # so the fresh cache directory sees real compiles

    assert main(["compile", "--all", "--device", "0"]) == 0
    out, err = capsys.readouterr()
    assert "\r[1/" in err.replace(" ", "") and ELEMENTWISE_BINARY.name in err
    match = re.search(r"compiled (\d+) kernels, (\d+) programs in [\d.]+ s .*SPIR-V cache: "
                      r"(\d+) hits, (\d+) misses; skipped (\d+)", out)
    assert match, out
    kernels, programs, hits, misses, skipped = map(int, match.groups())
    assert kernels >= 1 and programs >= kernels and misses >= 1 and hits + misses == programs
    assert skipped >= 1 and "_test_cli_needs_fp16 (needs float16)" in out
    assert (tmp_path / "cache" / "pipelines").is_dir()
    assert len(list((tmp_path / "cache" / "spirv").glob("*.spv"))) == misses

    # A second run compiles nothing.
    assert main(["compile", "--all"]) == 0
    match = re.search(r"(\d+) programs .*SPIR-V cache: (\d+) hits, (\d+) misses",
                      capsys.readouterr().out)
    assert match and match.group(1) == match.group(2) and match.group(3) == "0"


def test_cli_compile_needs_a_selection(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile"]) == 2
    assert "--all" in capsys.readouterr().err


def test_cli_compile_bad_device(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "--all", "--device", "99"]) == 2
    assert "99" in capsys.readouterr().err


def test_one_subgroup_kernels_pin_the_subgroup_size(ctx) -> None:
    import dataclasses

    from vkumd.compiler.kernels import attention, gemm
    from vkumd.compiler.registry import WORKGROUP, KernelRegistry

    caps = ctx.caps
    tiled = attention.ATTENTION_TILED
    variant = tiled.variants(caps)[0]
    pinned = ctx.kernels._pinned_subgroup(tiled, variant)
    if caps.subgroup_size_control:
        assert pinned == variant[WORKGROUP] == caps.subgroup_size
    else:
        assert pinned is None
    shared = gemm.shared_variant(caps, "F32")
    assert ctx.kernels._pinned_subgroup(gemm.GEMM, shared) is None  # talks through shared memory
    no_control = dataclasses.replace(caps, subgroup_size_control=False)
    registry = KernelRegistry(ctx.handle, no_control, push_descriptors=False)
    assert registry._pinned_subgroup(tiled, variant) is None
    registry.release()
