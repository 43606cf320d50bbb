"""vkumd's pick of lavapipe's vector width, and the rules that keep it from lying."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vkumd.vk import driver_settings
from vkumd.vk.binding import vk
from vkumd.vk.caps import coopmat_compiles

WIDTH = driver_settings.LAVAPIPE_VECTOR_WIDTH

# A fresh process (lavapipe's width is fixed per process): the subgroup size the device
# reports, the one a compiled kernel sees, and a GEMM whose columns cross a 16-lane boundary.
PROBE = textwrap.dedent('''
    import json, os, sys
    from dataclasses import dataclass
    import numpy as np
    import vkumd
    from vkumd import ops
    from vkumd.compiler.kernels import WORKGROUP
    from vkumd.compiler.push import PushLayout
    from vkumd.compiler.registry import Kernel
    from vkumd.testing.numerics import rel_error

    GLSL = """#version 450
    #extension GL_KHR_shader_subgroup_basic : require
    layout(local_size_x_id = 0) in;
    layout(set = 0, binding = 0) buffer Out { uint v[]; } result;
    layout(push_constant) uniform Params { uint unused; } pc;
    void main() { result.v[gl_LocalInvocationID.x] = gl_SubgroupSize; }
    """

    @dataclass(frozen=True)
    class Inline(Kernel):
        glsl: str = ""
        def source_text(self) -> str:
            return self.glsl

    push = PushLayout("unused:u32")
    kernel = Inline(name="probe_subgroup", source="probe_subgroup.comp", buffers=1, push=push,
                    defines={}, spec_constants={WORKGROUP: 0}, glsl=GLSL)
    with vkumd.Context() as ctx:
        program = ctx.kernels.program(kernel.specialize({WORKGROUP: 64}))
        out = ctx.empty((64,), "int32")
        stream = ctx.stream()
        stream.dispatch(program, [(out.allocation.buffer, out.allocation.offset, out.nbytes)],
                        push.pack(0), (1, 1, 1), (0,))
        stream.synchronize()
        rng = np.random.default_rng()
        a = rng.standard_normal((19, 7)).astype(np.float32)
        b = rng.standard_normal((7, 21)).astype(np.float32)
        got = ops.matmul(ctx.tensor(a), ctx.tensor(b)).numpy().astype(np.float64)
        want = a.astype(np.float64) @ b
        print(json.dumps({"reported": ctx.caps.subgroup_size,
                          "compiled": sorted(set(out.numpy().tolist())),
                          "driver": ctx.caps.driver_name,
                          "width": os.environ.get("LP_NATIVE_VECTOR_WIDTH"),
                          "gemm_error": rel_error(got, want)}))
        if len(sys.argv) > 1:
            os.environ["LP_NATIVE_VECTOR_WIDTH"] = sys.argv[1]
            try:
                vkumd.Context()
            except vkumd.VkumdValueError as exc:
                print(json.dumps({"refused": str(exc)}))
            again = ops.matmul(ctx.tensor(a), ctx.tensor(b)).numpy().astype(np.float64)
            print(json.dumps({"after": rel_error(again, want)}))
''')


def run_probe(env: dict[str, str], *args: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def env_without_width() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != WIDTH}


def test_avx512_without_a_user_setting_picks_512() -> None:
    assert driver_settings.chosen({}, frozenset({"avx2", "avx512f"}), False) == {WIDTH: "512"}


def test_a_user_setting_is_kept() -> None:
    assert driver_settings.chosen({WIDTH: "256"}, frozenset({"avx512f"}), False) == {}


def test_cpus_without_avx512_keep_the_driver_default() -> None:
    assert driver_settings.chosen({}, frozenset({"avx2", "fma"}), False) == {}
    assert driver_settings.chosen({}, frozenset(), False) == {}


def test_nothing_is_picked_once_another_library_loaded_lavapipe(tmp_path: Path) -> None:
    assert driver_settings.chosen({}, frozenset({"avx512f"}), True) == {}
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f10 r-xp 0 08:01 5 /usr/lib/x86_64-linux-gnu/libvulkan_lvp.so\n")
    assert driver_settings.lavapipe_loaded(str(maps))
    maps.write_text("7f00-7f10 r-xp 0 08:01 5 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert not driver_settings.lavapipe_loaded(str(maps))
    assert not driver_settings.lavapipe_loaded(str(tmp_path / "absent"))


def test_cpu_flags_reads_the_first_flags_line(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\n\nflags\t\t: other\n")
    assert driver_settings.cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "avx512f"}
    assert driver_settings.cpu_flags(str(tmp_path / "absent")) == frozenset()


def test_lavapipe_wider_than_8_lists_no_cooperative_matrices() -> None:
    llvmpipe = vk.VK_DRIVER_ID_MESA_LLVMPIPE
    assert coopmat_compiles(llvmpipe, 8)
    assert not coopmat_compiles(llvmpipe, 16)
    assert coopmat_compiles(vk.VK_DRIVER_ID_NVIDIA_PROPRIETARY, 32)


def test_a_fresh_process_compiles_at_the_width_its_device_reports() -> None:
    (row,) = run_probe(env_without_width())
    assert row["compiled"] == [row["reported"]], row
    assert row["gemm_error"] < 1e-5, row
    if row["driver"] == "llvmpipe" and "avx512f" in driver_settings.cpu_flags():
        assert row["reported"] == 16 and row["width"] == "512", row


def test_the_users_width_wins() -> None:
    (row,) = run_probe({**os.environ, WIDTH: "256"})
    assert row["width"] == "256"
    assert row["compiled"] == [row["reported"]], row
    if row["driver"] == "llvmpipe":
        assert row["reported"] == 8, row


def test_a_width_changed_mid_process_is_refused_and_earlier_contexts_stay_right() -> None:
    first, *rest = run_probe(env_without_width(), "384")
    refused, after = rest
    assert "LP_NATIVE_VECTOR_WIDTH is '384' now but was" in refused["refused"]
    assert "before the first vkumd call" in refused["refused"]
    assert first["gemm_error"] < 1e-5 and after["after"] < 1e-5, (first, after)


def test_lavapipe_loaded_by_someone_else_first_keeps_its_width() -> None:
    done = subprocess.run([sys.executable, "-c", LOADED_FIRST + PROBE], capture_output=True,
                          text=True, env=env_without_width(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (row,) = rows
    assert row["width"] is None, row  # vkumd set nothing
    assert row["compiled"] == [row["reported"]], row
    assert row["gemm_error"] < 1e-5, row


# Another library's Vulkan use before vkumd's: the loader maps every driver it finds.
LOADED_FIRST = textwrap.dedent('''
    import vulkan
    info = vulkan.VkInstanceCreateInfo(pApplicationInfo=vulkan.VkApplicationInfo(
        apiVersion=vulkan.VK_MAKE_VERSION(1, 3, 0)))
    other = vulkan.vkCreateInstance(info, None)
    vulkan.vkEnumeratePhysicalDevices(other)
''')


@pytest.mark.parametrize("flags", [frozenset({"avx512f"}), frozenset()])
def test_apply_sets_nothing_once_the_width_is_fixed(ctx, flags: frozenset[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # ctx: this process has made its first instance, so the width is what it was then.
    monkeypatch.setattr(driver_settings, "cpu_flags", lambda path="": flags)
    before = os.environ.get(WIDTH)
    assert driver_settings.apply() == {}
    assert os.environ.get(WIDTH) == before
