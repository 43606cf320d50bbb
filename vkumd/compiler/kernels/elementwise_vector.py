"""Where the elementwise kernels' vectorised variants (four elements per invocation) apply.

lavapipe turns every per-lane load into a gather, so loading four consecutive elements with
one vector load costs far less than four scalar loads. The generated fused kernel
(:mod:`~vkumd.compiler.kernels.fused_elementwise_plan`) and ``elementwise_binary.comp``
(:func:`~vkumd.compiler.kernels.elementwise_plan.binary_plan`) share one rule, here, for
when their push words allow it.
"""

from __future__ import annotations

from vkumd.compiler.kernels.limits import ELEMENTWISE_MAX_DIMS
from vkumd.compiler.kernels.type_codes import CODE_BYTES
from vkumd.vk.caps import DeviceCaps

# Elements per invocation of a vectorised variant.
VECTOR = 4


def vector_aligned(caps: DeviceCaps, codes: tuple[str, ...]) -> bool:
    """Whether every binding of these type codes starts aligned for a vector of four of its
    elements: ``minStorageBufferOffsetAlignment`` is a multiple of four of the widest."""
    return caps.min_storage_buffer_offset_alignment % (4 * max(CODE_BYTES[c] for c in codes)) == 0


def vector_layout(caps: DeviceCaps, codes: tuple[str, ...], words: list[int]) -> int | None:
    """The ``BCAST`` mask of the vectorised variant for these push words, or None where only
    the scalar variant is valid.

    Valid: ``ndim`` 0 (every operand contiguous and of the output's shape; the last
    ``n % 4`` elements are computed one per invocation); ``ndim`` 1 with every stride 0 (a
    broadcast element, bit set in the mask) or 1; ``ndim`` 2 with rows a multiple of 4 long,
    every column stride 0 (bit set) or 1, and the row stride of each input read by vectors
    a multiple of 4, so no four elements straddle two rows. And every binding must start
    aligned for a vector of its type, so that each vector access is aligned to its size:
    vectors are counted from the binding's start, and all Vulkan promises of that start is
    a multiple of ``minStorageBufferOffsetAlignment``, so that limit must be a multiple of
    four elements of every operand type (16 bytes on lavapipe, where every bindable view
    qualifies; the memory pool aligns allocations to at least 64 bytes and the graph's
    arena to 256).

    Args:
        caps: the device.
        codes: the type codes of the inputs, then the output's (keys of :data:`CODE_BYTES`).
        words: :func:`~vkumd.compiler.kernels.elementwise_plan.shape_words` of the problem.
    """
    if not vector_aligned(caps, codes):
        return None
    dims, ndim = ELEMENTWISE_MAX_DIMS, words[1]
    strides = [words[2 + dims * (1 + i):2 + dims * (2 + i)] for i in range(len(codes) - 1)]
    if ndim == 0:
        return 0
    if ndim == 1 and all(s[0] in (0, 1) for s in strides):
        return sum(1 << i for i, s in enumerate(strides) if s[0] == 0)
    if ndim == 2 and words[3] % 4 == 0 and all(
            s[1] == 0 or (s[1] == 1 and s[0] % 4 == 0) for s in strides):
        return sum(1 << i for i, s in enumerate(strides) if s[1] == 0)
    return None


def invocations(size: int, vectorised: bool) -> int:
    """Invocations that cover ``size`` elements: one each, or one per :data:`VECTOR` (the
    last ``size % VECTOR`` elements go to the first invocations, one each)."""
    return -(-size // VECTOR) if vectorised else size
