"""The kernel registry: what each shipped kernel accepts, and its variants per device.

A :class:`Kernel` names a GLSL source in ``shaders/``, the defines it accepts (any other is
an error), its specialization constants and its push-constant layout, so one pipeline serves
every shape. :meth:`Kernel.specialize` fixes a variant (checked against what the kernel
accepts) and :class:`KernelRegistry` turns it into a memoised
:class:`~vkumd.compiler.program.Program` for one device.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vkumd import settings
from vkumd.compiler.launch import KernelVariant
from vkumd.compiler.pipeline_cache import PipelineCache
from vkumd.compiler.program import LayoutCache, LayoutSignature, Program
from vkumd.compiler.push import PushLayout
from vkumd.compiler.shader_source import shaders_dir
from vkumd.compiler.spirv_cache import SpirvCache, default_cache
from vkumd.errors import CapabilityMissing, VkumdValueError
from vkumd.vk.binding import NULL
from vkumd.vk.caps import DeviceCaps

Variant = dict[str, Any]  # define name -> value, plus spec-constant name -> value
# The specialization constant every kernel takes for its workgroup width (constant_id 0).
WORKGROUP = "WORKGROUP_SIZE"
# The define a variant whose workgroup spans several subgroups names their planned size with.
SUBGROUP = "SG"


@dataclass(frozen=True)
class Kernel:
    """A kernel family shipped with vkumd.

    Attributes:
        name: registry key.
        source: file name under ``shaders/``.
        buffers: storage buffers bound at 0..n-1 of set 0.
        push: the push-constant block's layout (its members in GLSL order).
        defines: accepted define names mapped to their allowed values (empty: any value).
        spec_constants: specialization-constant names mapped to their ``constant_id``.
        requires: capabilities every variant needs: ``float16``, ``storage16``, ``int8``,
            ``storage8``, ``coopmat``, ``subgroup_arithmetic``.
        variants: the variants worth building on a device (for ``vkumd compile --all``).
        one_subgroup: whether a variant's workgroup must be exactly one subgroup (its lanes
            talk through subgroup operations only). Such pipelines require the subgroup size
            ``WORKGROUP`` (or the variant's ``SUBGROUP``, when it spans several subgroups) and
            full subgroups where the device has subgroup-size control.
        source_code: the GLSL text of a generated kernel (then ``source`` is only the name
            errors and dumps show); None for a kernel whose text is the file ``source``.
    """

    name: str
    source: str
    buffers: int
    push: PushLayout
    defines: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    spec_constants: Mapping[str, int] = field(default_factory=dict)
    requires: frozenset[str] = frozenset()
    variants: Callable[[DeviceCaps], list[Variant]] = lambda caps: [{}]
    one_subgroup: Callable[[Variant], bool] = lambda variant: False
    source_code: str | None = field(default=None, repr=False)

    @property
    def push_bytes(self) -> int:
        """Size of the push-constant block."""
        return self.push.size

    def source_text(self) -> str:
        """The GLSL source: the generated text, or the file's."""
        if self.source_code is not None:
            return self.source_code
        return (shaders_dir() / self.source).read_text()

    def specialize(self, variant: Mapping[str, Any] | None = None) -> KernelVariant:
        """This kernel with ``variant``'s defines and specialization constants fixed.

        Raises:
            VkumdValueError: a name the kernel has no define or constant for, or a define
                value it does not allow.
        """
        values = dict(variant or {})
        for key_name, value in values.items():
            if key_name in self.spec_constants:
                continue
            if key_name not in self.defines:
                known = sorted(set(self.defines) | set(self.spec_constants))
                raise VkumdValueError(f"kernel {self.name!r} has no define or constant "
                                      f"{key_name!r}; it accepts: {', '.join(known) or 'none'}")
            allowed = self.defines[key_name]
            if allowed and value not in allowed:
                raise VkumdValueError(f"kernel {self.name!r}: {key_name}={value!r} is not one "
                                      f"of {list(allowed)}")
        key = (self.name, tuple(sorted((k, str(v)) for k, v in values.items())))
        return KernelVariant(self, values, key)


KERNELS: dict[str, Kernel] = {}


def register(kernel: Kernel) -> Kernel:
    """Add a kernel to :data:`KERNELS`."""
    if kernel.name in KERNELS:
        raise VkumdValueError(f"kernel {kernel.name!r} is registered twice")
    KERNELS[kernel.name] = kernel
    return kernel


def effective_caps(caps: DeviceCaps) -> set[str]:
    """Capabilities a variant may use on ``caps``, after the ``VKUMD_DISABLE_*`` opt-outs."""
    have = set()
    if caps.shader_float16 and not settings.flag("VKUMD_DISABLE_FP16"):
        have.add("float16")
    if caps.storage_16bit:
        have.add("storage16")
    if caps.shader_int8:
        have.add("int8")
    if caps.storage_8bit:
        have.add("storage8")
    if (caps.cooperative_matrix and caps.vulkan_memory_model
            and not settings.flag("VKUMD_DISABLE_COOPMAT")):
        have.add("coopmat")
    if "arithmetic" in caps.subgroup_operations:
        have.add("subgroup_arithmetic")
    return have


@dataclass
class CompileSummary:
    """What :meth:`KernelRegistry.compile_all` did."""

    programs: int = 0
    seconds: float = 0.0
    spirv_hits: int = 0
    spirv_misses: int = 0
    skipped: list[str] = field(default_factory=list)


class KernelRegistry:
    """Builds and memoises pipelines for one device.

    Args:
        device: the ``VkDevice``.
        caps: its capabilities.
        push_descriptors: whether layouts are made for push descriptors.
        spirv_cache: defaults to the process-wide cache.
        pipeline_cache: the device's :class:`PipelineCache`.
    """

    def __init__(self, device: Any, caps: DeviceCaps, *, push_descriptors: bool,
                 spirv_cache: SpirvCache | None = None,
                 pipeline_cache: PipelineCache | None = None) -> None:
        self.device = device
        self.caps = caps
        self.push_descriptors = push_descriptors
        self.spirv_cache = spirv_cache or default_cache()
        self.pipeline_cache = pipeline_cache
        self.layouts = LayoutCache(device)
        self._programs: dict[tuple[str, tuple[tuple[str, str], ...]], Program] = {}
        self._lock = threading.Lock()
        # Called after each pipeline build with (kernel name, seconds, SPIR-V came from cache).
        self.on_compile: Callable[[str, float, bool], None] | None = None

    def supports(self, kernel: Kernel) -> bool:
        """Whether every capability ``kernel`` requires is available."""
        return kernel.requires <= effective_caps(self.caps)

    def program(self, kernel: str | KernelVariant, variant: Variant | None = None) -> Program:
        """The pipeline for a kernel variant: a :class:`KernelVariant`, or a kernel name and
        its ``variant`` (defines and spec constants).

        Raises:
            VkumdValueError: unknown kernel, unknown define, or a value it does not allow.
            CapabilityMissing: the device lacks what the kernel requires.
        """
        if isinstance(kernel, KernelVariant):
            chosen = kernel
        else:
            found = KERNELS.get(kernel)
            if found is None:
                raise VkumdValueError(f"no kernel named {kernel!r}; known: "
                                      f"{', '.join(sorted(KERNELS))}")
            chosen = found.specialize(variant)
        key = chosen.key
        program = self._programs.get(key)
        if program is not None:
            return program
        spec = chosen.kernel
        name = spec.name
        missing = spec.requires - effective_caps(self.caps)
        if missing:
            raise CapabilityMissing(
                f"kernel {name!r} needs {', '.join(sorted(missing))}, which {self.caps.name} "
                "lacks (or which a VKUMD_DISABLE_* variable turned off)")
        defines: dict[str, Any] = {}
        specialization: dict[int, int] = {}
        for key_name, value in chosen.variant.items():
            if key_name in spec.spec_constants:
                specialization[spec.spec_constants[key_name]] = int(value)
            else:
                defines[key_name] = value
        with self._lock:
            program = self._programs.get(key)
            if program is None:
                start = time.perf_counter()
                misses = self.spirv_cache.stats().misses
                spirv = self.spirv_cache.get_or_compile(spec.source_text(), name=spec.source,
                                                        defines=defines)
                layout = self.layouts.get(LayoutSignature(spec.buffers, spec.push_bytes,
                                                          self.push_descriptors))
                cache = self.pipeline_cache.handle if self.pipeline_cache else None
                program = Program(self.device, spirv, layout,
                                  pipeline_cache=cache if cache is not None else NULL,
                                  specialization=specialization, name=name,
                                  required_subgroup_size=self._pinned_subgroup(
                                      spec, chosen.variant))
                self._programs[key] = program
                if self.on_compile is not None:
                    self.on_compile(name, time.perf_counter() - start,
                                    self.spirv_cache.stats().misses == misses)
        return program

    def _pinned_subgroup(self, kernel: Kernel, variant: Mapping[str, Any]) -> int | None:
        """The subgroup size to require of a one-subgroup variant, where the device lets us."""
        if not kernel.one_subgroup(variant) or WORKGROUP not in variant:
            return None
        width = int(variant.get(SUBGROUP, variant[WORKGROUP]))
        caps = self.caps
        if caps.subgroup_size_control and caps.min_subgroup_size <= width <= caps.max_subgroup_size:
            return width
        return None

    def compile_all(self, progress: Callable[[int, int, str], None] | None = None
                    ) -> CompileSummary:
        """Build every variant of every kernel this device can use."""
        summary = CompileSummary()
        before = self.spirv_cache.stats()
        jobs = []
        for kernel in KERNELS.values():
            if not self.supports(kernel):
                summary.skipped.append(kernel.name)
                continue
            jobs.extend((kernel.name, v) for v in kernel.variants(self.caps))
        start = time.perf_counter()
        for done, (name, variant) in enumerate(jobs, 1):
            self.program(name, variant)
            if progress is not None:
                progress(done, len(jobs), name)
        after = self.spirv_cache.stats()
        summary.programs = len(jobs)
        summary.seconds = time.perf_counter() - start
        summary.spirv_hits = (after.hits_memory + after.hits_disk
                              - before.hits_memory - before.hits_disk)
        summary.spirv_misses = after.misses - before.misses
        return summary

    def __len__(self) -> int:
        return len(self._programs)

    def release(self) -> None:
        """Destroy every pipeline, then the layouts."""
        with self._lock:
            for program in self._programs.values():
                program.release()
            self._programs.clear()
            self.layouts.release()
