"""Device discovery, default choice, overrides and capabilities."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vkumd
from vkumd.runtime.device import default_device_index, resolve_device
from vkumd.vk import instance as instance_module
from vkumd.vk.caps import DeviceCaps


def test_devices_lists_lavapipe_with_caps() -> None:
    found = vkumd.devices()
    assert found, "the test machine must have a Vulkan driver"
    caps = found[0]
    assert isinstance(caps, DeviceCaps)
    assert caps.api_version >= (1, 3, 0)
    assert caps.subgroup_size >= 1
    assert caps.max_storage_buffer_range > 0
    assert caps.memory_types and caps.memory_heaps and caps.queue_families
    assert len(caps.pipeline_cache_uuid) == 16


def test_every_caps_field_is_documented() -> None:
    import inspect

    source = inspect.getsource(DeviceCaps)
    for field in dataclasses.fields(DeviceCaps):
        after = source.split(f"    {field.name}:", 1)[1].split("\n", 2)
        assert '"""' in after[1], f"DeviceCaps.{field.name} has no docstring"


def _fake(index: int, device_type: str, local: int, api: tuple[int, int, int] = (1, 3, 0)
          ) -> DeviceCaps:
    base = vkumd.devices()[0]
    heap = dataclasses.replace(base.memory_heaps[0], size=local, device_local=True)
    return dataclasses.replace(base, index=index, name=f"fake {device_type} {index}",
                               device_type=device_type, memory_heaps=(heap,), api_version=api)


def test_default_prefers_discrete_then_integrated_then_virtual_then_cpu(monkeypatch) -> None:
    monkeypatch.delenv("VKUMD_DEVICE", raising=False)
    devices = [_fake(0, "cpu", 1 << 34), _fake(1, "virtual", 1), _fake(2, "integrated", 1),
               _fake(3, "discrete", 1)]
    assert default_device_index(devices) == 3
    assert default_device_index(devices[:3]) == 2
    assert default_device_index(devices[:2]) == 1


def test_ties_go_to_more_device_local_memory(monkeypatch) -> None:
    monkeypatch.delenv("VKUMD_DEVICE", raising=False)
    devices = [_fake(0, "discrete", 8 << 30), _fake(1, "discrete", 80 << 30)]
    assert default_device_index(devices) == 1


def test_devices_below_vulkan_1_3_are_not_chosen(monkeypatch) -> None:
    monkeypatch.delenv("VKUMD_DEVICE", raising=False)
    devices = [_fake(0, "discrete", 1 << 34, api=(1, 2, 0)), _fake(1, "cpu", 1)]
    assert default_device_index(devices) == 1
    with pytest.raises(vkumd.DeviceUnavailable, match="Vulkan 1.3"):
        default_device_index(devices[:1])


def test_vkumd_device_by_index_and_name(monkeypatch) -> None:
    devices = [_fake(0, "cpu", 1), _fake(1, "discrete", 1)]
    monkeypatch.setenv("VKUMD_DEVICE", "0")
    assert default_device_index(devices) == 0
    monkeypatch.setenv("VKUMD_DEVICE", "DISCRETE")
    assert default_device_index(devices) == 1


@pytest.mark.parametrize("wanted", ["7", "no-such-gpu"])
def test_unknown_device_is_a_clear_error(wanted: str) -> None:
    devices = [_fake(0, "cpu", 1)]
    with pytest.raises(vkumd.DeviceUnavailable, match="devices are: 0: fake cpu 0"):
        resolve_device(devices, wanted)


@pytest.mark.parametrize("wanted", [-1, "-1", 1, "+3"])
def test_an_index_out_of_range_says_so(wanted: int | str) -> None:
    devices = [_fake(0, "cpu", 1)]
    with pytest.raises(vkumd.DeviceUnavailable,
                       match=r"index -?\d+ is out of range \(valid: 0\.\.0\); devices are: 0: "):
        resolve_device(devices, wanted)
    with pytest.raises(vkumd.VkumdTypeError, match="index or a name"):
        resolve_device(devices, 0.0)  # type: ignore[arg-type]


def test_context_on_unknown_device_fails_cleanly() -> None:
    before = vkumd.live_objects()
    with pytest.raises(vkumd.DeviceUnavailable):
        vkumd.Context(device="no-such-gpu")
    assert vkumd.live_objects() == before


def test_vkumd_icd_must_be_a_file(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("VKUMD_ICD", str(tmp_path / "missing.json"))
    with pytest.raises(vkumd.DeviceUnavailable, match="VKUMD_ICD"):
        vkumd.Context()


def test_vkumd_icd_selects_the_driver(monkeypatch) -> None:
    import glob

    icds = glob.glob("/usr/share/vulkan/icd.d/lvp_icd*.json")
    if not icds:
        pytest.skip("lavapipe's ICD json is not at the Debian path on this machine")
    monkeypatch.setenv("VKUMD_ICD", icds[0])
    monkeypatch.delenv("VK_DRIVER_FILES", raising=False)
    monkeypatch.delenv("VK_ICD_FILENAMES", raising=False)
    with vkumd.Context() as context:
        assert context.caps.driver_name == "llvmpipe"


def test_validation_without_the_layer_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setattr(instance_module, "available_layers", lambda: [])
    with pytest.raises(vkumd.LayerNotPresent, match="vulkan-validationlayers"):
        vkumd.Context(validation=True)


def test_validation_layer_is_enabled_in_the_suite(ctx) -> None:
    assert ctx.instance.validation


@pytest.mark.expect_validation_error
def test_validation_errors_reach_the_fixture(ctx) -> None:
    from vkumd.vk.binding import NULL, ffi, lib, new, vk

    # A zero-sized buffer breaks a valid-usage rule; the layer reports it synchronously.
    info = new("VkBufferCreateInfo", vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, size=0,
               usage=vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT)
    out = ffi.new("VkBuffer*")
    lib.vkCreateBuffer(ctx.device.handle, info, NULL, out)
    if out[0] != NULL:
        lib.vkDestroyBuffer(ctx.device.handle, out[0], NULL)


def test_cli_info_shows_the_default_device(capsys) -> None:
    from vkumd.cli import main

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "<- default" in out
    assert "cooperative-matrix shapes" in out
    assert "subgroup_size" in out


def test_a_vkumd_device_list_gives_context_its_first_entry(monkeypatch) -> None:
    devices = [_fake(0, "discrete", 1), _fake(1, "cpu", 1), _fake(2, "integrated", 1)]
    monkeypatch.setenv("VKUMD_DEVICE", "1,0")
    assert default_device_index(devices) == 1
    monkeypatch.setenv("VKUMD_DEVICE", " integrated , 1")
    assert default_device_index(devices) == 2
    monkeypatch.setenv("VKUMD_DEVICE", "0,0")
    with vkumd.Context() as ctx:  # the real device: a list opens one context, on entry 0
        assert ctx.caps.index == 0
        assert ctx.tensor(np.arange(5, dtype=np.float32)).numpy().tolist() == [0, 1, 2, 3, 4]


def test_a_bad_vkumd_device_list_is_refused_and_leaves_nothing(monkeypatch) -> None:
    before = vkumd.live_objects()
    monkeypatch.setenv("VKUMD_DEVICE", "0,,1")
    with pytest.raises(vkumd.VkumdValueError, match="entry 1 is empty"):
        vkumd.Context()
    assert vkumd.live_objects() == before
    monkeypatch.setenv("VKUMD_DEVICE", "no-such-gpu,0")  # the first entry decides
    with pytest.raises(vkumd.DeviceUnavailable, match="no device name contains"):
        vkumd.Context()
    assert vkumd.live_objects() == before
    monkeypatch.delenv("VKUMD_DEVICE")
    with vkumd.Context() as ctx:
        assert ctx.tensor(np.ones(3, np.float32)).numpy().sum() == 3
