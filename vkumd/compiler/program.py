"""A compiled compute pipeline (``Program``) and the layouts it binds, cached by signature."""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass
from typing import Any

from vkumd.vk.binding import NULL, ffi, lib, new, vk
from vkumd.vk.errors import check
from vkumd.vk.handle import Handle

# VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR
_PUSH_DESCRIPTOR_LAYOUT_BIT = 0x00000001
# VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT
_REQUIRE_FULL_SUBGROUPS_BIT = 0x00000002
_REQUIRED_SUBGROUP_SIZE_STYPE = 1000225001


@dataclass(frozen=True)
class LayoutSignature:
    """What a pipeline binds: ``buffers`` storage buffers and ``push_bytes`` of constants."""

    buffers: int
    push_bytes: int
    push_descriptors: bool


class Layout(Handle):
    """A descriptor-set layout and the pipeline layout built on it."""

    def __init__(self, device: Any, signature: LayoutSignature) -> None:
        super().__init__()
        self.device = device
        self.signature = signature
        bindings = ffi.new("VkDescriptorSetLayoutBinding[]", max(signature.buffers, 1))
        for i in range(signature.buffers):
            bindings[i].binding = i
            bindings[i].descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            bindings[i].descriptorCount = 1
            bindings[i].stageFlags = vk.VK_SHADER_STAGE_COMPUTE_BIT
        info = new("VkDescriptorSetLayoutCreateInfo",
                   vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                   flags=_PUSH_DESCRIPTOR_LAYOUT_BIT if signature.push_descriptors else 0,
                   bindingCount=signature.buffers, pBindings=bindings)
        out = ffi.new("VkDescriptorSetLayout*")
        check("vkCreateDescriptorSetLayout",
              lib.vkCreateDescriptorSetLayout(device, info, NULL, out))
        self.set_layout = out[0]
        self._set_layouts = ffi.new("VkDescriptorSetLayout[]", [self.set_layout])
        push_range = ffi.new("VkPushConstantRange*")
        push_range.stageFlags = vk.VK_SHADER_STAGE_COMPUTE_BIT
        push_range.offset = 0
        push_range.size = signature.push_bytes
        layout_info = new("VkPipelineLayoutCreateInfo",
                          vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                          setLayoutCount=1, pSetLayouts=self._set_layouts,
                          pushConstantRangeCount=1 if signature.push_bytes else 0,
                          pPushConstantRanges=push_range)
        pipeline_layout = ffi.new("VkPipelineLayout*")
        result = lib.vkCreatePipelineLayout(device, layout_info, NULL, pipeline_layout)
        if result < 0:
            lib.vkDestroyDescriptorSetLayout(device, self.set_layout, NULL)
        check("vkCreatePipelineLayout", result)
        self.handle = pipeline_layout[0]

    @property
    def set_layouts(self) -> Any:
        """A ``VkDescriptorSetLayout[1]`` array for descriptor-set allocation."""
        return self._set_layouts

    def _release(self) -> None:
        lib.vkDestroyPipelineLayout(self.device, self.handle, NULL)
        lib.vkDestroyDescriptorSetLayout(self.device, self.set_layout, NULL)


class LayoutCache:
    """Set and pipeline layouts shared by every pipeline with the same binding signature."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self._layouts: dict[LayoutSignature, Layout] = {}
        self._lock = threading.Lock()

    def get(self, signature: LayoutSignature) -> Layout:
        """The layout for ``signature``, created on first use."""
        with self._lock:
            layout = self._layouts.get(signature)
            if layout is None:
                layout = self._layouts[signature] = Layout(self.device, signature)
            return layout

    def __len__(self) -> int:
        return len(self._layouts)

    def release(self) -> None:
        """Destroy every layout (after the pipelines that use them)."""
        with self._lock:
            for layout in self._layouts.values():
                layout.release()
            self._layouts.clear()


class Program(Handle):
    """A compute pipeline built from SPIR-V with specialization constants.

    Args:
        device: the ``VkDevice``.
        spirv: the shader module's code.
        layout: the :class:`Layout` it binds.
        pipeline_cache: a ``VkPipelineCache`` handle or ``NULL``.
        specialization: ``constant_id -> uint32 value``.
        required_subgroup_size: pin the subgroup size (needs subgroup-size control).
        name: for messages and the profiler.
    """

    def __init__(self, device: Any, spirv: bytes, layout: Layout, *, pipeline_cache: Any,
                 specialization: dict[int, int] | None = None,
                 required_subgroup_size: int | None = None, name: str = "kernel") -> None:
        super().__init__()
        self.device = device
        self.layout = layout
        self.name = name
        code = ffi.from_buffer(spirv)
        module_info = new("VkShaderModuleCreateInfo",
                          vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                          codeSize=len(spirv), pCode=ffi.cast("uint32_t*", code))
        module = ffi.new("VkShaderModule*")
        check("vkCreateShaderModule", lib.vkCreateShaderModule(device, module_info, NULL, module),
              name)
        try:
            spec = specialization or {}
            entries = ffi.new("VkSpecializationMapEntry[]", max(len(spec), 1))
            for slot, constant_id in enumerate(sorted(spec)):
                entries[slot].constantID = constant_id
                entries[slot].offset = 4 * slot
                entries[slot].size = 4
            data = struct.pack(f"<{len(spec)}I", *(spec[k] for k in sorted(spec)))
            data_buf = ffi.new("char[]", data) if data else NULL
            spec_info = new("VkSpecializationInfo", mapEntryCount=len(spec), pMapEntries=entries,
                            dataSize=len(data), pData=data_buf)
            entry_name = ffi.new("char[]", b"main")
            stage = new("VkPipelineShaderStageCreateInfo",
                        vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                        stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module[0], pName=entry_name,
                        pSpecializationInfo=spec_info if spec else NULL)
            subgroup = None
            if required_subgroup_size:
                subgroup = new("VkPipelineShaderStageRequiredSubgroupSizeCreateInfo",
                               _REQUIRED_SUBGROUP_SIZE_STYPE,
                               requiredSubgroupSize=required_subgroup_size)
                stage.pNext = subgroup
                stage.flags = _REQUIRE_FULL_SUBGROUPS_BIT
            info = ffi.new("VkComputePipelineCreateInfo*")
            info.sType = vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO
            info.stage = stage[0]
            info.layout = layout.handle
            out = ffi.new("VkPipeline*")
            check("vkCreateComputePipelines",
                  lib.vkCreateComputePipelines(device, pipeline_cache, 1, info, NULL, out), name)
            self.handle = out[0]
        finally:
            lib.vkDestroyShaderModule(device, module[0], NULL)

    def _release(self) -> None:
        lib.vkDestroyPipeline(self.device, self.handle, NULL)
