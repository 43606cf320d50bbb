"""VkResult → exception mapping."""

from __future__ import annotations

import pytest
import vulkan as vk

from vkumd.vk import errors


@pytest.mark.parametrize(("code", "cls"), [
    (vk.VK_ERROR_OUT_OF_DEVICE_MEMORY, errors.OutOfDeviceMemory),
    (vk.VK_ERROR_OUT_OF_HOST_MEMORY, errors.OutOfHostMemory),
    (vk.VK_ERROR_DEVICE_LOST, errors.DeviceLost),
    (vk.VK_ERROR_FEATURE_NOT_PRESENT, errors.FeatureNotPresent),
    (vk.VK_ERROR_EXTENSION_NOT_PRESENT, errors.ExtensionNotPresent),
    (vk.VK_ERROR_INITIALIZATION_FAILED, errors.InitializationFailed),
    (-1000069000, errors.OutOfPoolMemory),
    (-1000161000, errors.VulkanError),
])
def test_failing_result_raises_typed_error_naming_the_call(code: int, cls: type) -> None:
    with pytest.raises(cls) as info:
        errors.check("vkSomething", code)
    assert isinstance(info.value, errors.VkumdError)
    assert "vkSomething" in str(info.value)
    assert errors.result_name(code) in str(info.value)
    assert info.value.result == code


def test_memory_errors_are_memory_errors() -> None:
    assert issubclass(errors.OutOfDeviceMemory, MemoryError)
    assert issubclass(errors.OutOfHostMemory, MemoryError)


@pytest.mark.parametrize("code", [vk.VK_SUCCESS, vk.VK_TIMEOUT, vk.VK_NOT_READY])
def test_ordinary_outcomes_are_returned(code: int) -> None:
    assert errors.check("vkWaitForFences", code) == code


def test_unknown_negative_code_still_raises() -> None:
    with pytest.raises(errors.VulkanError, match="VkResult\\(-12345\\)"):
        errors.check("vkX", -12345)


def test_extension_range_codes_have_their_names() -> None:
    # The binding stores these without the minus sign; the driver returns them negative.
    assert errors.result_name(-1000069000) == "VK_ERROR_OUT_OF_POOL_MEMORY"
    assert errors.ERROR_OUT_OF_POOL_MEMORY == -1000069000
