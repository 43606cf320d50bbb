"""The pass registry and the default pipeline.

A pass is a function ``Graph -> Graph`` that leaves its argument alone (it works on a copy).
Every pass can be switched off by name, with ``disable=`` or the environment variable
``VKUMD_DISABLE_PASSES`` (comma-separated names, read on each call), e.g.
``VKUMD_DISABLE_PASSES=cse,constant_folding``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.attention_layout import fold_attention_layouts
from vkumd.framework.graph.constant_folding import fold_constants
from vkumd.framework.graph.conv_input_affine import fold_input_affine_into_conv
from vkumd.framework.graph.cse import eliminate_common_subexpressions
from vkumd.framework.graph.dce import eliminate_dead_code
from vkumd.framework.graph.fusion_attention import fuse_attention
from vkumd.framework.graph.fusion_conv_bn import fold_batch_norm_into_conv
from vkumd.framework.graph.fusion_conv_epilogue import fuse_conv_epilogue
from vkumd.framework.graph.fusion_elementwise import fuse_elementwise
from vkumd.framework.graph.fusion_epilogue import fuse_epilogue
from vkumd.framework.graph.fusion_norm import fuse_add_layer_norm
from vkumd.framework.graph.fusion_rope import fuse_rope_into_cache_write
from vkumd.framework.graph.hardswish_rewrite import rewrite_hardswish
from vkumd.framework.graph.ir import Graph
from vkumd.framework.graph.pad_folding import fold_pads
from vkumd.framework.graph.transpose_folding import fold_transposes
from vkumd.settings import register_reader
from vkumd.settings import text as setting

Pass = Callable[[Graph], Graph]

DISABLE_VARIABLE = "VKUMD_DISABLE_PASSES"

# Name -> pass.
PASSES: dict[str, Pass] = {
    "dce": eliminate_dead_code,
    "constant_folding": fold_constants,
    "conv_bn_folding": fold_batch_norm_into_conv,
    "pad_folding": fold_pads,
    "hardswish_rewrite": rewrite_hardswish,
    "conv_input_affine_folding": fold_input_affine_into_conv,
    "cse": eliminate_common_subexpressions,
    "transpose_folding": fold_transposes,
    "attention_fusion": fuse_attention,
    "attention_layout": fold_attention_layouts,
    "epilogue_fusion": fuse_epilogue,
    "conv_epilogue_fusion": fuse_conv_epilogue,
    "add_norm_fusion": fuse_add_layer_norm,
    "rope_fusion": fuse_rope_into_cache_write,
    "elementwise_fusion": fuse_elementwise,
}

# Cleanups first (so fusion sees the smallest graph), fusion in the middle, a last DCE for
# what fusion and folding orphaned. Transposes fold into matmul flags before fusion, so
# attention fusion sees ``q @ k.transpose(-2, -1)`` in the form it matches.
# Batch norms fold into their convolutions after constant folding, which may have computed
# their statistics; explicit pads fold into the convolutions and poolings reading them;
# hard swish written out becomes one op (after constant folding made its 3 and 6 constants),
# which the convolution epilogue fusion can take; an affine ``x * a + b`` before an unpadded
# convolution goes into its weights and bias.
CLEANUP: tuple[str, ...] = ("dce", "constant_folding", "conv_bn_folding", "pad_folding",
                            "hardswish_rewrite", "conv_input_affine_folding", "cse",
                            "transpose_folding")
# Fusion: attention first (epilogue fusion would take its mask add as a residual), then its
# heads/sequence permutes folded into its layouts, then the GEMM epilogues (a residual stored
# with the product beats re-reading it in the norm), then residual + norm, elementwise last,
# so it takes only what the pattern fusions left (rope into the cache write before it, though
# neither touches the other's nodes). Convolutions take their bias, activation and residual
# beside the matmul epilogues (after batch norms folded into them in the cleanup).
FUSION: tuple[str, ...] = ("attention_fusion", "attention_layout", "epilogue_fusion",
                           "conv_epilogue_fusion", "add_norm_fusion", "rope_fusion",
                           "elementwise_fusion")
PIPELINE: tuple[str, ...] = (*CLEANUP, *FUSION, "dce")


def _pass_names(what: str, value: Iterable[str] | None) -> list[str]:
    """``value`` as a list of names, refusing a bare string (its letters would be names) and
    items that are not strings."""
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise VkumdTypeError(f"{what}={value!r}: give a list of pass names, e.g. "
                             f"['cse', 'dce']; the passes are {', '.join(PASSES)}")
    names = list(value)
    for name in names:
        if not isinstance(name, str):
            raise VkumdTypeError(f"{what}: pass names are strings, not {name!r}; the passes "
                                 f"are {', '.join(PASSES)}")
    return names


def disabled_passes(disable: Iterable[str] | None = None) -> set[str]:
    """The names switched off by ``disable`` and by ``VKUMD_DISABLE_PASSES``.

    Raises:
        VkumdValueError: a name that is no registered pass (a typo would otherwise be
            silently ignored); the message lists the passes.
    """
    listed = setting(DISABLE_VARIABLE) or ""
    names = {n.strip() for n in listed.split(",") if n.strip()}
    names |= set(_pass_names("disable", disable))
    unknown = sorted(names - set(PASSES))
    if unknown:
        raise VkumdValueError(f"unknown pass {', '.join(unknown)} (in disable= or "
                              f"{DISABLE_VARIABLE}); the passes are {', '.join(PASSES)}")
    return names


register_reader(DISABLE_VARIABLE, lambda _: disabled_passes())


def run_passes(graph: Graph, passes: Sequence[str] | None = None, *,
               disable: Iterable[str] | None = None, check: bool = True) -> Graph:
    """Run ``passes`` (default :data:`PIPELINE`) over ``graph``, skipping disabled ones.

    Args:
        graph: the graph (not modified).
        passes: pass names, in order; a name may repeat.
        disable: names not to run (added to ``VKUMD_DISABLE_PASSES``).
        check: validate the result of every pass (a broken pass then fails at once).

    Returns:
        The final graph; its ``passes_run`` lists the passes that ran, in order.

    Raises:
        VkumdValueError: an unknown pass name.
        GraphError: a pass produced an invalid graph (with ``check``).
    """
    order = tuple(PIPELINE if passes is None else _pass_names("passes", passes))
    unknown = [n for n in order if n not in PASSES]
    if unknown:
        raise VkumdValueError(f"unknown pass {', '.join(unknown)}; the passes are "
                              f"{', '.join(PASSES)}")
    off = disabled_passes(disable)
    g = graph
    for name in order:
        if name in off:
            continue
        g = PASSES[name](g)
        g.passes_run.append(name)
        if check:
            g.check()
    return g if g is not graph else graph.copy()
