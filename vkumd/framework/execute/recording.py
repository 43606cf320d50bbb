"""One size-recording: a graph's launches captured at the true symbol sizes of a call.

The memory belongs to the :class:`~vkumd.framework.execute.bucket.Bucket`: its input and
output tensors and its arena are sized for the bucket's symbol sizes. A recording places a
true-shaped contiguous view of each value at the start of that value's bucket-sized slot
(the same offset of the same buffer; a value's true size never exceeds its bucket size), and
lowers every node over those views inside ``ctx.capture()``. Push constants and grids so
carry the true sizes: no padded element is read or computed, and the results are the bytes
an exact-shape run gives. Reshapes are views of their input, as in the exact run, and the
output of an op that updates an input in place (``kv_write``) is that input's tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from vkumd.errors import VkumdValueError
from vkumd.framework import dtypes, ops
from vkumd.framework.execute.arena import TensorView, view
from vkumd.framework.execute.lower import VIEW_OPS, lowering_for
from vkumd.framework.graph.errors import GraphError
from vkumd.framework.graph.ir import Value
from vkumd.framework.graph.memory import updated_value
from vkumd.framework.tensor import Tensor

if TYPE_CHECKING:
    from vkumd.framework.execute.bucket import Bucket


class Recording:
    """The captured launches of one set of true symbol sizes, over a bucket's memory.

    Args:
        bucket: the bucket whose memory the views point into.
        env: the true size of every symbol (each at most the bucket's).
        bound: caller tensors read in place of the bucket's input tensors, by input name
            (each of the input's true shape and dtype; the capture pins their memory).

    Attributes:
        env: the true sizes.
        inputs: a true-shaped view of the bucket's tensor, per input name.
        outputs: a true-shaped view of the bucket's tensor, per graph output.
        arena_views: the intermediates' true-shaped views into the bucket's arena.

    Raises:
        GraphError, UnsupportedOpError: a node cannot be lowered (naming it), or a value's
            true size does not fit in its bucket slot.
    """

    def __init__(self, bucket: Bucket, env: Mapping[str, int],
                 bound: Mapping[str, Tensor] | None = None) -> None:
        self.bucket = bucket
        self.env = dict(env)
        self.bound = dict(bound or {})
        self.captured: Any = None
        self.arena_views: list[TensorView] = []
        self.tensors = self._make_views()
        self.inputs = {v.name: self.tensors[v.id] for v in bucket.graph.inputs}
        self.outputs = [self._output_view(i, v) for i, v in enumerate(bucket.graph.outputs)]
        try:
            self._capture()
        except BaseException:
            self.release()
            raise

    def shape_of(self, value: Value) -> tuple[int, ...]:
        """A value's true shape in this recording."""
        return self.bucket.graph.dims.bind(value.shape, self.env)

    def _fit(self, base: Tensor, value: Value, offset: int = 0) -> TensorView:
        try:
            return view(base, self.shape_of(value), value.dtype, offset)
        except VkumdValueError as exc:
            # Only a dimension that shrinks as a symbol grows can get here.
            dims = self.bucket.graph.dims
            names = sorted({name for d in value.shape if not isinstance(dims.resolve(d), int)
                            for name in dims.resolve(d).symbols})
            exact = ", ".join(f"{n!r}: None" for n in names)
            raise GraphError(f"value %{value.id} of true shape {self.shape_of(value)} does "
                             f"not fit in its slot for the bucket {self.bucket.env} ({exc}); "
                             f"a dimension that shrinks as a symbol grows needs exact sizes: "
                             f"buckets={{{exact}}}",
                             value.producer.describe() if value.producer else None) from exc

    def _make_views(self) -> dict[int, Tensor]:
        bucket = self.bucket
        tensors: dict[int, Tensor] = dict(bucket.weights)
        for v in bucket.graph.inputs:
            given = self.bound.get(v.name)
            tensors[v.id] = given if given is not None else self._fit(bucket.inputs[v.name], v)
        for node in bucket.graph.nodes:
            updated = updated_value(node)
            for out in node.outputs:
                if updated is not None:  # an in-place update: the input's own tensor
                    tensors[out.id] = tensors[updated.id]
                elif not bucket.kept(node):  # a folded reshape: its input's bytes
                    tensors[out.id] = self._fit(tensors[node.inputs[0].id], out)
                elif out.id in bucket.owned:
                    tensors[out.id] = self._fit(bucket.owned[out.id], out)
                else:
                    arena, offset = bucket.slot(out)
                    made = self._fit(arena, out, offset)
                    self.arena_views.append(made)
                    tensors[out.id] = made
        return tensors

    def _output_view(self, index: int, v: Value) -> Tensor:
        if v.producer is None:  # an input or weight returned: copied, never aliased
            return self._fit(self.bucket.returned[index], v)
        return self.tensors[v.id]

    def _capture(self) -> None:
        graph = self.bucket.graph
        with self.bucket.context.capture() as captured:
            self.captured = captured
            ranges = [v.binding for v in self.arena_views if v.binding is not None]
            if ranges:
                captured.track_overlaps(ranges)
            for node in graph.nodes:
                if not self.bucket.kept(node):
                    continue
                outs = [self.tensors[v.id] for v in node.outputs]
                ins = [self.tensors[v.id] if v is not None else None for v in node.inputs]
                try:
                    if node.op in VIEW_OPS:  # a reshape returning an input's bytes
                        ops.copy(view(ins[0], outs[0].shape, outs[0].dtype), out=outs[0])
                    else:
                        lowering_for(node)(node, ins, outs)
                except GraphError:
                    raise
                except Exception as exc:
                    raise GraphError(f"lowering failed: {exc}", node.describe()) from exc
            for v, out in zip(graph.outputs, self.outputs, strict=True):
                if v.producer is None:
                    ops.copy(self.tensors[v.id], out=out)

    @property
    def launches(self) -> int:
        """Dispatches and copies captured."""
        return self.captured.dispatches + self.captured.copies

    @property
    def barriers(self) -> int:
        """Barriers the hazard tracker put between the launches."""
        return self.captured.barriers

    def write_input(self, name: str, value: Any) -> None:
        """Put a call's input ``value`` (numpy-like or a Tensor, of the true shape) into the
        true-shaped view of the bucket's input tensor.

        Raises:
            VkumdTypeError: a Tensor of another dtype.
            VkumdValueError: a Tensor of another context.
        """
        target = self.inputs[name]
        if target is value or _same_bytes(value, target):  # read where it is: nothing to move
            return
        if not isinstance(value, Tensor):
            target.write(np.asarray(value))
            return
        if value.context is not target.context:
            raise VkumdValueError(f"input {name!r} is a tensor of another context")
        if value.dtype is not target.dtype:
            raise dtypes.mismatch(f"input {name!r}", value.dtype, target.dtype)
        ops.copy(value, out=target)

    def replay(self) -> None:
        """Submit the captured work on the current stream."""
        if self.launches:
            self.captured.replay()

    def release(self) -> None:
        """Wait for replays in flight and free the command buffer. The views free nothing:
        the bucket owns the memory. Safe to call twice."""
        if self.captured is not None:
            self.captured.release()


def _same_bytes(value: Any, target: TensorView) -> bool:
    """Whether ``value`` is a view of exactly ``target``'s bytes (a tensor from
    ``CompiledGraph.input_tensors``, possibly of an earlier recording of these sizes)."""
    return (isinstance(value, TensorView) and value.base is target.base
            and value.byte_offset == target.byte_offset and value.shape == target.shape
            and value.dtype is target.dtype)
