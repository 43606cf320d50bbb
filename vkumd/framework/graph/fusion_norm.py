"""Residual + layer-norm fusion: ``layer_norm(add(x, residual))`` becomes one
``add_layer_norm`` node (ONNX Runtime's SkipLayerNormalization), whose kernel never writes the
sum to memory.

It fuses when the sum is read only by the norm (and is no graph output) and both addends
have the sum's shape and a float dtype: a broadcast addend (a bias) is elementwise fusion's
or the GEMM epilogue's, not this kernel's. Runs after epilogue fusion, which already folds
``matmul + residual`` into the GEMM's store -- one pass fewer than an ``add_layer_norm``
reading the product back -- so this pass takes the sums no GEMM produced.
"""

from __future__ import annotations

from vkumd.framework.graph.fusion_rewrite import replace_group
from vkumd.framework.graph.ir import Graph
from vkumd.framework.graph.operands import FLOATS


def fuse_add_layer_norm(graph: Graph) -> Graph:
    """A copy of ``graph`` with each ``layer_norm`` of a one-reader, same-shape ``add``
    replaced by ``add_layer_norm``.

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    for norm in list(g.nodes):
        if norm.op != "layer_norm":
            continue
        total = norm.inputs[0]
        add = total.producer if total is not None else None
        if add is None or add.op != "add" or len(total.users) != 1 or total in g.outputs:
            continue
        x, residual = add.inputs
        if x is None or residual is None or x is residual or total.dtype.name not in FLOATS:
            continue
        if not all(g.dims.same_shape(v.shape, total.shape) for v in (x, residual)):
            continue
        replace_group(g, norm, [add, norm], "add_layer_norm",
                      [x, residual, norm.inputs[1], norm.inputs[2]], dict(norm.attrs))
    return g
