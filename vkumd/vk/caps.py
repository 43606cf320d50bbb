"""``DeviceCaps``: everything vkumd needs to know about a physical device, read once.

Each field documents its fallback: what the runtime does when the device lacks the feature.
The kernel registry chooses variants from this object alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from vkumd.vk.binding import NULL, Chain, ffi, lib, raw_proc, version_tuple, vk
from vkumd.vk.errors import check

_DEVICE_TYPES = {
    vk.VK_PHYSICAL_DEVICE_TYPE_OTHER: "other",
    vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: "integrated",
    vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: "discrete",
    vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: "virtual",
    vk.VK_PHYSICAL_DEVICE_TYPE_CPU: "cpu",
}

_COMPONENT_TYPES = {
    vk.VK_COMPONENT_TYPE_FLOAT16_KHR: "float16",
    vk.VK_COMPONENT_TYPE_FLOAT32_KHR: "float32",
    vk.VK_COMPONENT_TYPE_FLOAT64_KHR: "float64",
    vk.VK_COMPONENT_TYPE_SINT8_KHR: "int8",
    vk.VK_COMPONENT_TYPE_SINT16_KHR: "int16",
    vk.VK_COMPONENT_TYPE_SINT32_KHR: "int32",
    vk.VK_COMPONENT_TYPE_SINT64_KHR: "int64",
    vk.VK_COMPONENT_TYPE_UINT8_KHR: "uint8",
    vk.VK_COMPONENT_TYPE_UINT16_KHR: "uint16",
    vk.VK_COMPONENT_TYPE_UINT32_KHR: "uint32",
    vk.VK_COMPONENT_TYPE_UINT64_KHR: "uint64",
}
# bfloat16 is not in this binding's headers (VK_KHR_shader_bfloat16 came later).
_COMPONENT_TYPES[1000141000] = "bfloat16"

_SCOPES = {vk.VK_SCOPE_DEVICE_KHR: "device", vk.VK_SCOPE_WORKGROUP_KHR: "workgroup",
           vk.VK_SCOPE_SUBGROUP_KHR: "subgroup", vk.VK_SCOPE_QUEUE_FAMILY_KHR: "queue_family"}

_SUBGROUP_OPS = {
    vk.VK_SUBGROUP_FEATURE_BASIC_BIT: "basic", vk.VK_SUBGROUP_FEATURE_VOTE_BIT: "vote",
    vk.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT: "arithmetic",
    vk.VK_SUBGROUP_FEATURE_BALLOT_BIT: "ballot", vk.VK_SUBGROUP_FEATURE_SHUFFLE_BIT: "shuffle",
    vk.VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT: "shuffle_relative",
    vk.VK_SUBGROUP_FEATURE_CLUSTERED_BIT: "clustered", vk.VK_SUBGROUP_FEATURE_QUAD_BIT: "quad",
}

# Drivers where device memory is host memory: tensors can be mapped, no staging copies.
_CPU_DEVICE_TYPES = ("cpu",)


# Widest lavapipe subgroup whose cooperative-matrix pipelines compile (Mesa 26.1.6, checked).
_LLVMPIPE_COOPMAT_WIDTH = 8


def coopmat_compiles(driver_id: int, subgroup_size: int) -> bool:
    """Whether a driver that lists ``VK_KHR_cooperative_matrix`` can build its shaders.

    Mesa 26.1's lavapipe lists the extension at 16-wide subgroups (``LP_NATIVE_VECTOR_WIDTH``
    512) too, then crashes the process inside ``vkCreateComputePipelines`` on every
    cooperative-matrix shader; there the capability is reported absent.
    """
    return not (driver_id == vk.VK_DRIVER_ID_MESA_LLVMPIPE
                and subgroup_size > _LLVMPIPE_COOPMAT_WIDTH)


@dataclass(frozen=True)
class CoopMatShape:
    """One cooperative-matrix configuration the driver lists.

    ``M×K`` A times ``K×N`` B accumulated into ``M×N`` C, at ``scope``.
    """

    m: int
    n: int
    k: int
    a_type: str
    b_type: str
    c_type: str
    result_type: str
    scope: str
    saturating: bool = False

    def __str__(self) -> str:
        return (f"{self.m}x{self.n}x{self.k} {self.a_type}*{self.b_type}+{self.c_type}"
                f"->{self.result_type} ({self.scope})")


@dataclass(frozen=True)
class MemoryType:
    """One ``VkMemoryType``: its heap index and the property flags decoded."""

    index: int
    heap: int
    device_local: bool
    host_visible: bool
    host_coherent: bool
    host_cached: bool
    flags: int


@dataclass(frozen=True)
class MemoryHeap:
    """One ``VkMemoryHeap``: its size in bytes and whether it is device-local."""

    index: int
    size: int
    device_local: bool


@dataclass(frozen=True)
class QueueFamily:
    """One queue family: its index, count, capabilities and timestamp bits."""

    index: int
    count: int
    compute: bool
    transfer: bool
    graphics: bool
    timestamp_valid_bits: int


@dataclass(frozen=True)
class DeviceCaps:
    """Capabilities of one physical device, as the driver reports them."""

    index: int
    """Position in :func:`vkumd.devices`."""
    name: str
    """``deviceName``, e.g. ``"llvmpipe (LLVM 19.1.7, 256 bits)"``."""
    device_type: str
    """``discrete``, ``integrated``, ``virtual``, ``cpu`` or ``other``; drives kernel choice."""
    api_version: tuple[int, int, int]
    """Vulkan version the driver implements; vkumd needs 1.3 or later."""
    driver_version: int
    """Raw ``driverVersion`` (vendor-specific encoding); part of every cache key."""
    driver_name: str
    """``VkPhysicalDeviceVulkan12Properties.driverName``, e.g. ``"llvmpipe"``."""
    driver_info: str
    """``driverInfo``: the driver's own version text, e.g. ``"Mesa 25.0.7 (LLVM 15.0.6)"``."""
    vendor_id: int
    """PCI vendor ID (0x10DE NVIDIA, 0x1002 AMD, 0x8086 Intel, 0x10005 Mesa)."""
    device_id: int
    """Vendor-specific device ID."""
    pipeline_cache_uuid: bytes
    """16 bytes; a pipeline cache saved under another UUID is discarded."""
    subgroup_size: int
    """Default subgroup (warp/wave) width; kernels that broadcast along a subgroup use it."""
    min_subgroup_size: int
    """Smallest subgroup size selectable with subgroup-size control."""
    max_subgroup_size: int
    """Largest subgroup size selectable with subgroup-size control."""
    subgroup_operations: frozenset[str]
    """Subgroup operation classes in compute shaders (basic, vote, arithmetic, ballot, …).
    Fallback: kernels needing a missing class are not selected."""
    shader_float16: bool
    """float16 arithmetic in shaders. Fallback: float16 data is converted and computed in
    float32."""
    shader_int8: bool
    """int8 arithmetic in shaders. Fallback: int8 data is widened to int32 for arithmetic."""
    shader_float64: bool
    """``shaderFloat64``: double arithmetic in shaders. Without it float64 tensors are refused
    (naming the feature): no float32 computing stands in for float64."""
    shader_int64: bool
    """``shaderInt64``: 64-bit integer arithmetic in shaders. uint64 tensors are stored and
    computed natively with it and refused (naming the feature) without it. int64 tensors are
    computed natively with it and in two 32-bit words without it
    (:attr:`int64_arithmetic`)."""
    shader_int16: bool
    """``shaderInt16``: 16-bit integer arithmetic. Not needed for int16/uint16 tensors, whose
    kernels widen to 32 bits (they need 16-bit storage only)."""
    storage_16bit: bool
    """16-bit values in storage buffers. Fallback: float16 tensors are packed in 32-bit words."""
    storage_8bit: bool
    """8-bit values in storage buffers. Fallback: int8 tensors are packed in 32-bit words."""
    shared_memory_size: int
    """``maxComputeSharedMemorySize`` in bytes; bounds the tile sizes of shared-memory kernels."""
    max_workgroup_size: tuple[int, int, int]
    """``maxComputeWorkGroupSize`` per dimension."""
    max_workgroup_invocations: int
    """``maxComputeWorkGroupInvocations``."""
    max_workgroup_count: tuple[int, int, int]
    """``maxComputeWorkGroupCount``; larger grids are split into several dispatches."""
    max_storage_buffer_range: int
    """Largest storage-buffer binding in bytes; a larger tensor is refused at creation."""
    max_push_constants_size: int
    """Bytes of push constants a pipeline may use."""
    min_storage_buffer_offset_alignment: int
    """Alignment of a storage-buffer binding's offset; the allocator honours it."""
    non_coherent_atom_size: int
    """Granularity of flushes/invalidations of non-coherent host memory."""
    timestamps: bool
    """Compute queues support timestamp queries. Fallback: host timestamps around submits."""
    timestamp_period_ns: float
    """Nanoseconds per timestamp tick."""
    push_descriptors: bool
    """``VK_KHR_push_descriptor``. Fallback: descriptor pools recycled per submission."""
    timeline_semaphores: bool
    """Timeline semaphores (core in 1.2, optional feature). Fallback: one fence per submit."""
    buffer_device_address: bool
    """Shaders can use 64-bit buffer addresses (``GL_EXT_buffer_reference``). Fallback:
    every buffer is bound through a descriptor."""
    subgroup_size_control: bool
    """A pipeline may require a subgroup size (Vulkan 1.3 feature)."""
    vulkan_memory_model: bool
    """The Vulkan memory model (needed by shaders that use ``GL_KHR_memory_scope_semantics``,
    as cooperative-matrix kernels do). Fallback: such kernels are not selected."""
    cooperative_matrix: bool
    """``VK_KHR_cooperative_matrix`` with the feature on. Fallback: tiled scalar kernels.
    False on lavapipe with subgroups wider than 8 (its ``LP_NATIVE_VECTOR_WIDTH`` above 256),
    where Mesa 26.1 crashes compiling cooperative-matrix shaders."""
    cooperative_matrix_shapes: tuple[CoopMatShape, ...]
    """Every configuration from ``vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR``."""
    memory_heaps: tuple[MemoryHeap, ...]
    """The device's memory heaps."""
    memory_types: tuple[MemoryType, ...]
    """The device's memory types, in the driver's order of preference."""
    unified_memory: bool
    """Every device-local heap is also host-visible (CPU drivers, many integrated GPUs):
    tensors are mapped directly and uploads are plain copies. Fallback: a staging ring."""
    queue_families: tuple[QueueFamily, ...]
    """Every queue family."""
    extensions: frozenset[str] = field(repr=False, default=frozenset())
    """Device extensions the driver offers."""

    def __hash__(self) -> int:
        # Planners cache on the caps and hash them on every op; the generated hash walks every
        # field (about 1 us), so it is worked out once. Frozen, so it cannot go stale.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict:
        # String hashes differ between processes: a pickled copy works its hash out anew.
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state

    @property
    def int64_arithmetic(self) -> str:
        """How int64 tensors are computed: ``"native"`` (``int64_t`` in shaders) where
        ``shaderInt64`` is listed, else ``"emulated"``: each value is two 32-bit words (low,
        high) and the kernels' emulated variants compute storage, casts, add, sub, mul,
        comparisons, max, min and the bitwise ops and shifts with carries and
        ``umulExtended``. Ops the emulated path does not offer (division, remainder, pow)
        are refused naming ``shaderInt64``."""
        return "native" if self.shader_int64 else "emulated"

    @property
    def device_local_bytes(self) -> int:
        """Total size of the device-local heaps; breaks ties in device selection."""
        return sum(heap.size for heap in self.memory_heaps if heap.device_local)

    @property
    def has_transfer_queue(self) -> bool:
        """Whether a queue family does transfers but not compute (a DMA engine)."""
        return any(fam.transfer and not fam.compute and not fam.graphics
                   for fam in self.queue_families)

    def coopmat_shapes(self, a_type: str, c_type: str,
                       scope: str = "subgroup") -> list[CoopMatShape]:
        """Listed shapes with A and B of ``a_type`` accumulating into ``c_type`` at ``scope``."""
        return [s for s in self.cooperative_matrix_shapes
                if s.a_type == a_type and s.b_type == a_type and s.c_type == c_type
                and s.result_type == c_type and s.scope == scope]


def _text(chars: Any) -> str:
    value = chars if isinstance(chars, str) else ffi.string(chars)
    return value.decode() if isinstance(value, bytes) else value


def device_extensions(physical: Any) -> frozenset[str]:
    """Return the names of the device extensions a physical device offers."""
    count = ffi.new("uint32_t*")
    check("vkEnumerateDeviceExtensionProperties",
          lib.vkEnumerateDeviceExtensionProperties(physical, NULL, count, NULL))
    props = ffi.new("VkExtensionProperties[]", count[0])
    check("vkEnumerateDeviceExtensionProperties",
          lib.vkEnumerateDeviceExtensionProperties(physical, NULL, count, props))
    return frozenset(ffi.string(props[i].extensionName).decode() for i in range(count[0]))


def _coopmat_shapes(instance: Any, physical: Any) -> tuple[CoopMatShape, ...]:
    query = raw_proc(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR",
                     "PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
    if query is None:
        return ()
    name = "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"
    count = ffi.new("uint32_t*")
    check(name, query(physical, count, NULL))
    props = ffi.new("VkCooperativeMatrixPropertiesKHR[]", count[0])
    for i in range(count[0]):
        props[i].sType = vk.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR
    check(name, query(physical, count, props))
    shapes = []
    for i in range(count[0]):
        p = props[i]
        shapes.append(CoopMatShape(
            m=p.MSize, n=p.NSize, k=p.KSize,
            a_type=_COMPONENT_TYPES.get(p.AType, f"type{p.AType}"),
            b_type=_COMPONENT_TYPES.get(p.BType, f"type{p.BType}"),
            c_type=_COMPONENT_TYPES.get(p.CType, f"type{p.CType}"),
            result_type=_COMPONENT_TYPES.get(p.ResultType, f"type{p.ResultType}"),
            scope=_SCOPES.get(p.scope, f"scope{p.scope}"),
            saturating=bool(p.saturatingAccumulation)))
    return tuple(shapes)


def query_caps(instance: Any, physical: Any, index: int) -> DeviceCaps:
    """Read every capability of ``physical`` into a :class:`DeviceCaps`."""
    extensions = device_extensions(physical)

    props = Chain("VkPhysicalDeviceProperties2", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2)
    p11 = props.add("VkPhysicalDeviceVulkan11Properties",
                    vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES)
    p12 = props.add("VkPhysicalDeviceVulkan12Properties",
                    vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES)
    p13 = props.add("VkPhysicalDeviceVulkan13Properties",
                    vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_PROPERTIES)
    lib.vkGetPhysicalDeviceProperties2(physical, props.head)
    base = props.head.properties
    limits = base.limits

    feats = Chain("VkPhysicalDeviceFeatures2", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2)
    f11 = feats.add("VkPhysicalDeviceVulkan11Features",
                    vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES)
    f12 = feats.add("VkPhysicalDeviceVulkan12Features",
                    vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES)
    f13 = feats.add("VkPhysicalDeviceVulkan13Features",
                    vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES)
    fcm = None
    if "VK_KHR_cooperative_matrix" in extensions:
        fcm = feats.add("VkPhysicalDeviceCooperativeMatrixFeaturesKHR",
                        vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR)
    lib.vkGetPhysicalDeviceFeatures2(physical, feats.head)

    mem = ffi.new("VkPhysicalDeviceMemoryProperties*")
    lib.vkGetPhysicalDeviceMemoryProperties(physical, mem)
    heaps = tuple(
        MemoryHeap(i, mem.memoryHeaps[i].size,
                   bool(mem.memoryHeaps[i].flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT))
        for i in range(mem.memoryHeapCount))
    types = []
    for i in range(mem.memoryTypeCount):
        flags = mem.memoryTypes[i].propertyFlags
        types.append(MemoryType(
            index=i, heap=mem.memoryTypes[i].heapIndex,
            device_local=bool(flags & vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT),
            host_visible=bool(flags & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT),
            host_coherent=bool(flags & vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT),
            host_cached=bool(flags & vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT),
            flags=flags))
    device_local_types = [t for t in types if t.device_local]
    unified = bool(device_local_types) and all(
        any(t.host_visible for t in types if t.heap == h.index)
        for h in heaps if h.device_local)

    qcount = ffi.new("uint32_t*")
    lib.vkGetPhysicalDeviceQueueFamilyProperties(physical, qcount, NULL)
    qprops = ffi.new("VkQueueFamilyProperties[]", qcount[0])
    lib.vkGetPhysicalDeviceQueueFamilyProperties(physical, qcount, qprops)
    families = tuple(
        QueueFamily(i, qprops[i].queueCount,
                    compute=bool(qprops[i].queueFlags & vk.VK_QUEUE_COMPUTE_BIT),
                    transfer=bool(qprops[i].queueFlags & (vk.VK_QUEUE_TRANSFER_BIT
                                                          | vk.VK_QUEUE_COMPUTE_BIT
                                                          | vk.VK_QUEUE_GRAPHICS_BIT)),
                    graphics=bool(qprops[i].queueFlags & vk.VK_QUEUE_GRAPHICS_BIT),
                    timestamp_valid_bits=qprops[i].timestampValidBits)
        for i in range(qcount[0]))
    compute_families = [f for f in families if f.compute]

    ops = p11.subgroupSupportedOperations
    compute_stage = bool(p11.subgroupSupportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT)
    coopmat = bool(fcm is not None and fcm.cooperativeMatrix
                   and coopmat_compiles(p12.driverID, p11.subgroupSize))
    return DeviceCaps(
        index=index,
        name=_text(base.deviceName),
        device_type=_DEVICE_TYPES.get(base.deviceType, "other"),
        api_version=version_tuple(base.apiVersion),
        driver_version=base.driverVersion,
        driver_name=_text(p12.driverName),
        driver_info=_text(p12.driverInfo),
        vendor_id=base.vendorID,
        device_id=base.deviceID,
        pipeline_cache_uuid=bytes(ffi.buffer(base.pipelineCacheUUID, 16)),
        subgroup_size=p11.subgroupSize,
        min_subgroup_size=p13.minSubgroupSize or p11.subgroupSize,
        max_subgroup_size=p13.maxSubgroupSize or p11.subgroupSize,
        subgroup_operations=frozenset(
            name for bit, name in _SUBGROUP_OPS.items() if compute_stage and ops & bit),
        shader_float16=bool(f12.shaderFloat16),
        shader_int8=bool(f12.shaderInt8),
        shader_float64=bool(feats.head.features.shaderFloat64),
        shader_int64=bool(feats.head.features.shaderInt64),
        shader_int16=bool(feats.head.features.shaderInt16),
        storage_16bit=bool(f11.storageBuffer16BitAccess),
        storage_8bit=bool(f12.storageBuffer8BitAccess),
        shared_memory_size=limits.maxComputeSharedMemorySize,
        max_workgroup_size=tuple(limits.maxComputeWorkGroupSize),
        max_workgroup_invocations=limits.maxComputeWorkGroupInvocations,
        max_workgroup_count=tuple(limits.maxComputeWorkGroupCount),
        max_storage_buffer_range=limits.maxStorageBufferRange,
        max_push_constants_size=limits.maxPushConstantsSize,
        min_storage_buffer_offset_alignment=limits.minStorageBufferOffsetAlignment,
        non_coherent_atom_size=limits.nonCoherentAtomSize,
        timestamps=bool(compute_families and compute_families[0].timestamp_valid_bits
                        and limits.timestampPeriod > 0),
        timestamp_period_ns=float(limits.timestampPeriod),
        push_descriptors="VK_KHR_push_descriptor" in extensions,
        timeline_semaphores=bool(f12.timelineSemaphore),
        buffer_device_address=bool(f12.bufferDeviceAddress),
        subgroup_size_control=bool(f13.subgroupSizeControl),
        vulkan_memory_model=bool(f12.vulkanMemoryModel),
        cooperative_matrix=coopmat,
        cooperative_matrix_shapes=_coopmat_shapes(instance, physical) if coopmat else (),
        memory_heaps=heaps,
        memory_types=tuple(types),
        unified_memory=unified,
        queue_families=families,
        extensions=extensions,
    )
