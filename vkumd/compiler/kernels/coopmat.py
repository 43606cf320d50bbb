"""What the cooperative-matrix kernels (GEMM's ``coopmat`` path, ``attention_coopmat``) share.

Both multiply float16 fragments into float32 accumulators at a subgroup shape the driver
lists, stage their operands in shared memory as 16-byte words of eight halves, and give each
workgroup a few whole subgroups. The shaders declare their fragments with
``shaders/include/coopmat.glsl``; the hosts pick the shape and check a block config's
workgroup and shared memory with the functions here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from vkumd.vk.caps import CoopMatShape, DeviceCaps

# The listed shape preferred when the driver has it (NVIDIA's tensor-core native f16 shape).
COOPMAT_PREFERRED_SHAPE = (16, 16, 16)
# Halves per shared-memory word: fragments are addressed in whole 16-byte words.
HALVES_PER_WORD = 8


def staged_in_words(shape: CoopMatShape) -> bool:
    """Whether fragments of ``shape`` start on whole shared-memory words along N and K."""
    return shape.n % HALVES_PER_WORD == 0 and shape.k % HALVES_PER_WORD == 0


def ranked_shapes(shapes: Iterable[CoopMatShape],
                  usable: Callable[[CoopMatShape], bool]) -> list[CoopMatShape]:
    """The ``usable`` shapes, best first: :data:`COOPMAT_PREFERRED_SHAPE` if listed, then by
    size (the largest does the most work per load); ties keep the driver's order."""
    return sorted((s for s in shapes if usable(s)),
                  key=lambda s: ((s.m, s.n, s.k) != COOPMAT_PREFERRED_SHAPE, -s.m * s.n * s.k))


def workgroup_problem(caps: DeviceCaps, subgroups: str, count: int) -> str | None:
    """Why a workgroup of ``count`` subgroups (described as ``subgroups``, e.g. ``"2x2"``) is
    too wide for ``caps``, or None."""
    threads = count * caps.subgroup_size
    limit = min(caps.max_workgroup_invocations, caps.max_workgroup_size[0])
    if threads > limit:
        return (f"{subgroups} subgroups of {caps.subgroup_size} are {threads} invocations; "
                f"{caps.name} allows {limit} per workgroup")
    return None


def shared_memory_problem(caps: DeviceCaps, need: int, where: str = "") -> str | None:
    """Why ``need`` bytes of shared memory (``where``: e.g. `` at head_dim 64``) do not fit
    ``caps``, or None."""
    if need > caps.shared_memory_size:
        return (f"needs {need} bytes of shared memory{where}; {caps.name} allows "
                f"{caps.shared_memory_size} per workgroup")
    return None
