"""The graph compiler's core: IR, shape inference, builder, passes and memory planner.

Needs no device: it imports only :mod:`vkumd.errors`, :mod:`vkumd.framework.dtypes` and
numpy. The op registry it reads (:data:`OPS`) is filled by the op families of
:mod:`vkumd.framework.opset`, which ``vkumd`` imports; lowering a graph to kernel launches is
:mod:`vkumd.framework.execute`'s job.
"""

from vkumd.framework.graph.builder import GraphBuilder
from vkumd.framework.graph.constant_folding import fold_constants
from vkumd.framework.graph.cse import eliminate_common_subexpressions
from vkumd.framework.graph.dce import eliminate_dead_code
from vkumd.framework.graph.dims import Dim, as_dim, as_shape, product, sym
from vkumd.framework.graph.errors import GraphError, GraphTypeError, UnsupportedOpError
from vkumd.framework.graph.ir import Graph, Node, Value, ValueKind
from vkumd.framework.graph.memory import Allocation, MemoryPlan, plan_memory
from vkumd.framework.graph.passes import PASSES, PIPELINE, disabled_passes, run_passes
from vkumd.framework.graph.reference import evaluate
from vkumd.framework.graph.registry import OPS, OpDef, TensorType, infer, op_info, supported_ops
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.graph.trace import Trace, TracedTensor, TraceError, Tracer, trace
from vkumd.framework.graph.transpose_folding import fold_transposes

__all__ = ["PASSES", "PIPELINE", "Allocation", "Dim", "DimTable", "Graph", "GraphBuilder",
           "GraphError", "GraphTypeError", "MemoryPlan", "Node", "OPS", "OpDef", "TensorType",
           "UnsupportedOpError", "Value", "ValueKind", "as_dim", "as_shape", "disabled_passes",
           "eliminate_common_subexpressions", "eliminate_dead_code", "evaluate",
           "fold_constants", "fold_transposes", "infer", "op_info", "plan_memory", "product",
           "run_passes", "supported_ops", "sym"]
__all__ += ["Trace", "TraceError", "TracedTensor", "Tracer", "trace"]
