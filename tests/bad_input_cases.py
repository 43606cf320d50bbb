"""Bad calls outside the ops: Context options, tensor factories, Tensor methods, memory,
streams and events, capture, DLPack. Each is ``Case(id, call, error, message fragment)``."""

from __future__ import annotations

import numpy as np
from bad_input_env import Case, Env, capture, raise_in_child

import vkumd
from vkumd import ops
from vkumd.errors import (
    CaptureError,
    ContextClosed,
    DeviceUnavailable,
    VkumdError,
    VkumdTypeError,
    VkumdValueError,
)
from vkumd.vk.errors import OutOfDeviceMemory

C = Case
TE, VE = VkumdTypeError, VkumdValueError
HUGE = (2**32, 2**32)  # 2**64 elements: numpy's int64 product of it wraps to 0


def _with_released_stream(env: Env) -> None:
    stream = env.ctx.stream()
    stream.release()
    with stream:
        pass


def _released_event_wait(env: Env) -> None:
    event = env.ctx.default_stream.record()
    event.release()
    env.ctx.default_stream.wait(event)


def _with_stream_in_capture(env: Env) -> None:
    stream = env.ctx.stream()
    try:
        capture(env, lambda: stream.__enter__())
    finally:
        stream.release()


def _nested_capture(env: Env) -> None:
    with env.ctx.capture(), env.ctx.capture():
        pass


def _empty_graph_replay(env: Env) -> None:
    with env.ctx.capture() as g:
        pass
    g.replay()


def _released_graph_replay(env: Env) -> None:
    g = env.graph()
    g.release()
    g.replay()


def _replay_in_capture(env: Env) -> None:
    g = env.graph()
    capture(env, g.replay)


CONTEXT = [
    C("context_device_out_of_range", lambda e: vkumd.Context(device=99), DeviceUnavailable,
      "out of range"),
    C("context_device_unknown_name", lambda e: vkumd.Context(device="no-such-gpu"),
      DeviceUnavailable, "no device name contains"),
    C("context_device_negative", lambda e: vkumd.Context(device=-1), DeviceUnavailable,
      "out of range"),
    C("context_device_float", lambda e: vkumd.Context(device=0.5), TE, "index or a name"),
    C("context_device_list", lambda e: vkumd.Context(device=[0]), TE, "index or a name"),
    C("context_device_bool", lambda e: vkumd.Context(device=True), TE, "index or a name"),
    C("context_validation_string", lambda e: vkumd.Context(validation="no"), TE,
      "validation='no'"),
    C("context_zero_memory_int", lambda e: vkumd.Context(zero_memory=1), TE, "zero_memory=1"),
    C("context_device_only_string", lambda e: vkumd.Context(device_only_memory="yes"), TE,
      "True, False or None"),
    C("context_push_descriptors_string", lambda e: vkumd.Context(push_descriptors="off"), TE,
      "push_descriptors"),
    C("context_block_size_string", lambda e: vkumd.Context(block_size="64MB"), TE,
      "byte count"),
    C("context_block_size_small", lambda e: vkumd.Context(block_size=1024), VE, "1 MiB"),
    C("context_block_size_negative", lambda e: vkumd.Context(block_size=-1), VE, "1 MiB"),
    C("context_memory_limit_negative", lambda e: vkumd.Context(memory_limit=-1), VE,
      "must not be negative"),
    C("context_memory_limit_bad_string", lambda e: vkumd.Context(memory_limit="lots"), VE,
      "lots"),
    C("context_memory_limit_float", lambda e: vkumd.Context(memory_limit=1.5), TE,
      "byte count"),
    C("context_memory_limit_list", lambda e: vkumd.Context(memory_limit=[1]), TE,
      "byte count"),
]

FACTORIES = [
    C("tensor_object", lambda e: e.ctx.tensor(np.array([1, None], dtype=object)), TE,
      "cannot become tensors"),
    C("tensor_complex", lambda e: e.ctx.tensor(np.ones(3, np.complex64)), TE,
      "cannot become tensors"),
    C("tensor_complex_with_dtype", lambda e: e.ctx.tensor(np.ones(3, complex), "float32"),
      TE, "cannot be converted"),
    C("tensor_str", lambda e: e.ctx.tensor(np.array(["a", "b"])), TE, "cannot become"),
    C("tensor_bytes", lambda e: e.ctx.tensor(np.array([b"a"])), TE, "cannot become"),
    C("tensor_none", lambda e: e.ctx.tensor(None), TE, "cannot become"),
    C("tensor_float64_no_dtype", lambda e: e.ctx.tensor(np.ones(3)), TE,
      "not converted silently"),
    C("tensor_python_floats", lambda e: e.ctx.tensor([1.0, 2.0]), TE, "pass dtype="),
    # int64 arrays are int64 tensors (as torch makes them); asked for int32, none is wrapped.
    C("tensor_int64_past_int32", lambda e: e.ctx.tensor(np.array([2**40 + 1]), dtype="int32"),
      VE, "do not fit in int32"),
    C("tensor_datetime", lambda e: e.ctx.tensor(np.array(["2026-01-01"], "datetime64[D]"),
                                                "float32"), TE, "cannot be converted"),
    C("tensor_ragged", lambda e: e.ctx.tensor([[1.0], [1.0, 2.0]]), VE, "not a rectangular"),
    C("tensor_dtype_complex128", lambda e: e.ctx.tensor(np.ones(3), "complex128"), TE,
      "not supported"),
    C("tensor_uint16_out_of_range", lambda e: e.ctx.tensor(np.array([70000]), "uint16"), VE,
      "do not fit in uint16"),
    C("tensor_dtype_unknown", lambda e: e.ctx.tensor(np.ones(3, np.float32), "float8"), TE,
      "not supported"),
    C("tensor_too_big", lambda e: e.ctx.tensor(
        np.zeros(e.ctx.caps.max_storage_buffer_range // 4 + 1, np.float32)), VE,
      "maxStorageBufferRange"),
    C("empty_negative", lambda e: e.ctx.empty(-1), VE, "negative dimension"),
    C("empty_negative_inner", lambda e: e.ctx.empty((2, -3)), VE, "negative dimension"),
    C("empty_huge_wraps_int64", lambda e: e.ctx.empty(HUGE), VE, "maxStorageBufferRange"),
    C("zeros_huge_wraps_int64", lambda e: e.ctx.zeros(HUGE), VE, "maxStorageBufferRange"),
    C("empty_huge_3d", lambda e: e.ctx.empty((2**21,) * 3, "int8"), VE,
      "maxStorageBufferRange"),
    C("empty_past_binding_limit", lambda e: e.ctx.empty(2**40), VE, "maxStorageBufferRange"),
    C("empty_float_shape", lambda e: e.ctx.empty(2.5), TE, "not a sequence of ints"),
    C("empty_float_dim", lambda e: e.ctx.empty((2, 2.0)), TE, "must hold ints"),
    C("empty_bool_dim", lambda e: e.ctx.empty((True, 2)), TE, "must hold ints"),
    C("empty_string_shape", lambda e: e.ctx.empty("abc"), TE, "not a sequence of ints"),
    C("empty_none_shape", lambda e: e.ctx.empty(None), TE, "not a sequence of ints"),
    C("empty_2d_array_shape", lambda e: e.ctx.empty(np.zeros((2, 2), int)), TE,
      "not a sequence of ints"),
    C("empty_dtype_complex128", lambda e: e.ctx.empty(3, "complex128"), TE, "not supported"),
    C("empty_dtype_numpy_complex", lambda e: e.ctx.empty(3, np.complex64), TE,
      "not supported"),
    C("empty_dtype_object", lambda e: e.ctx.empty(3, object), TE, "not supported"),
    C("zeros_dtype_unknown", lambda e: e.ctx.zeros(3, "bogus"), TE, "not supported"),
    C("zeros_dtype_list", lambda e: e.ctx.zeros(3, [1]), TE, "not supported"),
]

TENSOR = [
    C("write_wrong_shape", lambda e: e.t((3,)).write(np.ones(4)), VE, "shape (4,)"),
    C("write_transposed_shape", lambda e: e.t((2, 3)).write(np.ones((3, 2))), VE,
      "shape (3, 2)"),
    C("write_complex", lambda e: e.t((3,)).write(np.ones(3, complex)), TE, "complex128"),
    C("write_strings", lambda e: e.t((2,)).write(["a", "b"]), TE, "cannot write"),
    C("write_objects", lambda e: e.t((2,)).write(np.array([1, None], object)), TE,
      "cannot write"),
    C("write_ragged", lambda e: e.t((2,)).write([[1], [1, 2]]), VE, "not a rectangular"),
    C("write_stream_not_a_stream", lambda e: e.t((3,)).write(np.ones(3), stream=42), VE,
      "stream belongs to another context"),
    C("write_stream_of_other_context",
      lambda e: e.t((3,)).write(np.ones(3), stream=e.other.default_stream), VE,
      "another context"),
    C("numpy_after_release", lambda e: e.released().numpy(), VE, "was released"),
    C("write_after_release", lambda e: e.released().write(np.ones((2, 3))), VE,
      "was released"),
    C("dlpack_after_release", lambda e: np.from_dlpack(e.released()), VE, "was released"),
    C("numpy_after_close", lambda e: e.closed().numpy(), ContextClosed, "was closed"),
    C("write_after_close", lambda e: e.closed().write(np.zeros((2, 3))), ContextClosed,
      "was closed"),
    C("dlpack_bfloat16", lambda e: np.from_dlpack(e.t((3,), "bfloat16")), VE, "bfloat16"),
    C("len_of_0d", lambda e: len(e.ctx.zeros(())), TE, "0-d"),
    C("from_dlpack_none", lambda e: vkumd.from_dlpack(None, e.ctx), TE, "DLPack"),
    C("from_dlpack_list", lambda e: vkumd.from_dlpack([1.0, 2.0], e.ctx), TE, "DLPack"),
    C("from_dlpack_context_not_a_context",
      lambda e: vkumd.from_dlpack(np.ones(3, np.float32), 42), TE, "vkumd.Context"),
    C("from_dlpack_complex", lambda e: vkumd.from_dlpack(np.ones(3, complex), e.ctx), TE,
      "cannot become"),
    C("from_dlpack_float64", lambda e: vkumd.from_dlpack(np.ones(3), e.ctx), TE,
      "not converted silently"),
    C("from_dlpack_bfloat16_tensor", lambda e: vkumd.from_dlpack(e.t((3,), "bfloat16"),
                                                                 e.other), VE, "bfloat16"),
    C("from_dlpack_bad_dtype", lambda e: vkumd.from_dlpack(np.ones(3, np.float32), e.ctx,
                                                           dtype="complex128"), TE,
      "not supported"),
]

# The Tensor API: operators, indexing and methods (they call the ops, so the refusals are
# the ops' own, named after the method).
METHODS = [
    C("tensor_plus_string", lambda e: e.t() + "a", TE, "must be a vkumd Tensor"),
    C("tensor_matmul_int", lambda e: e.t((2, 2)) @ 3, TE, "must be a vkumd Tensor"),
    C("tensor_less_than_list", lambda e: e.t() < [1, 2, 3], TE, "must be a vkumd Tensor"),
    C("tensor_index_float", lambda e: e.t()[1.5], TE, "not supported"),
    C("tensor_index_out_of_range", lambda e: e.t()[5], vkumd.VkumdIndexError, "out of range"),
    C("tensor_index_too_many", lambda e: e.t()[0, 0, 0], vkumd.VkumdIndexError, "indices"),
    C("tensor_index_step_zero", lambda e: e.t()[::0], VE, "slice step 0"),
    C("tensor_index_two_ellipses", lambda e: e.t()[..., ...], VE, "one ..."),
    C("tensor_index_list", lambda e: e.t()[[0, 1]], TE, "not supported"),
    C("tensor_setitem_wrong_shape", lambda e: e.t().__setitem__(0, np.ones(4, np.float32)),
      VE, "does not broadcast"),
    C("tensor_iterate_0d", lambda e: list(e.ctx.zeros(())), TE, "0-d"),
    C("tensor_reshape_wrong_count", lambda e: e.t().reshape(4), VE, "has 6 elements"),
    C("tensor_sum_dim_out_of_range", lambda e: e.t().sum(dim=5), VE, "out of range"),
    C("tensor_softmax_dim_string", lambda e: e.t().softmax(dim="x"), TE, "must be an int"),
    C("tensor_gelu_approximate", lambda e: e.t().gelu(approximate="fast"), VE,
      "approximate='fast'"),
    C("tensor_astype_complex128", lambda e: e.t().astype("complex128"), TE, "not supported"),
    C("tensor_add_released", lambda e: e.released() + e.t(), VE, "was released"),
]

MEMORY = [
    C("set_limit_negative", lambda e: e.ctx.memory.set_limit(size=-5), VE,
      "must not be negative"),
    C("set_limit_bad_string", lambda e: e.ctx.memory.set_limit(size="lots"), VE, "lots"),
    C("set_limit_float", lambda e: e.ctx.memory.set_limit(size=1.5), TE, "byte count"),
    C("set_limit_fraction_string", lambda e: e.ctx.memory.set_limit(fraction="0.5"), TE,
      "fraction"),
    C("set_limit_fraction_zero", lambda e: e.ctx.memory.set_limit(fraction=0), VE,
      "(0, 1]"),
    C("set_limit_fraction_above_one", lambda e: e.ctx.memory.set_limit(fraction=2.0), VE,
      "(0, 1]"),
    C("set_limit_fraction_nan", lambda e: e.ctx.memory.set_limit(fraction=float("nan")), VE,
      "(0, 1]"),
    C("pool_allocate_negative", lambda e: e.ctx.memory.allocate(-1), VE, "cannot allocate"),
    C("pool_allocate_string", lambda e: e.ctx.memory.allocate("10"), TE, "10"),
    C("ctx_allocate_float", lambda e: e.ctx.allocate(10.5), TE, "10.5"),
    C("pool_allocate_too_much", lambda e: e.ctx.memory.allocate(2**62), OutOfDeviceMemory,
      "asked for 4611686018427387904 bytes"),
    C("ctx_allocate_after_close", lambda e: e.closed_context().allocate(64), ContextClosed,
      "was closed"),
    C("pool_allocate_after_close", lambda e: raise_in_child("""
        c = vkumd.Context(); c.close(); c.memory.allocate(64)"""), ContextClosed, "closed"),
]

STREAMS = [
    C("stream_wait_int", lambda e: e.ctx.default_stream.wait(42), TE, "takes an Event"),
    C("stream_record_int", lambda e: e.ctx.default_stream.record(42), TE,
      "takes an Event or None"),
    C("stream_wait_event_of_other_context",
      lambda e: e.ctx.default_stream.wait(e.other.default_stream.record()), VE,
      "event belongs to another context"),
    C("stream_record_event_of_other_context",
      lambda e: e.ctx.default_stream.record(e.other.default_stream.record()), VE,
      "event belongs to another context"),
    C("stream_wait_released_event", _released_event_wait, VkumdError, "event was released"),
    C("synchronize_timeout_string", lambda e: e.ctx.synchronize(timeout="1"), TE,
      "timeout='1'"),
    C("synchronize_timeout_negative", lambda e: e.ctx.synchronize(timeout=-1), VE,
      "negative"),
    C("stream_synchronize_timeout_nan",
      lambda e: e.ctx.default_stream.synchronize(timeout=float("nan")), VE, "NaN"),
    C("stream_synchronize_timeout_bool",
      lambda e: e.ctx.default_stream.synchronize(timeout=True), TE, "bool"),
    C("event_synchronize_timeout_negative",
      lambda e: e.ctx.default_stream.record().synchronize(timeout=-0.5), VE, "negative"),
    C("event_elapsed_time_int", lambda e: e.ctx.default_stream.record().elapsed_time(42), TE,
      "takes an Event"),
    C("event_timestamp_never_recorded", lambda e: vkumd.Event(e.ctx).timestamp_ns(), VE,
      "never recorded"),
    C("event_of_not_a_context", lambda e: vkumd.Event(42), TE, "vkumd Context"),
    C("stream_unknown_queue", lambda e: e.ctx.stream("graphics"), VE, "'compute' or"),
    C("stream_batch_zero", lambda e: e.ctx.stream(max_batch_dispatches=0), VE, ">= 1"),
    C("stream_batch_string", lambda e: e.ctx.stream(max_batch_bytes="1MB"), TE, "int"),
    C("stream_release_default", lambda e: e.ctx.default_stream.release(), VkumdError,
      "lives as long as its context"),
    C("with_released_stream", _with_released_stream, VkumdError, "was released"),
    C("stream_after_close", lambda e: e.closed_context().stream(), ContextClosed,
      "was closed"),
    C("synchronize_after_close", lambda e: e.closed_context().synchronize(), ContextClosed,
      "was closed"),
]

CAPTURE = [
    C("capture_numpy", lambda e: capture(e, e.t().numpy), CaptureError, "Tensor.numpy()"),
    C("capture_write", lambda e: capture(e, lambda: e.ctx.zeros(3).write(np.ones(3))),
      CaptureError, "Tensor.write()"),
    C("capture_tensor_upload", lambda e: capture(e, lambda: e.t()), CaptureError,
      "Tensor.write()"),
    C("capture_write_on_stream",
      lambda e: (lambda t: capture(e, lambda: t.write(np.ones(3), stream=e.ctx.default_stream)))(
          e.ctx.zeros(3)), CaptureError, "Tensor.write()"),
    C("capture_zeros_int8", lambda e: capture(e, lambda: e.ctx.zeros(3, "int8")),
      CaptureError, "int8"),
    C("capture_synchronize", lambda e: capture(e, e.ctx.synchronize), CaptureError,
      "ctx.synchronize()"),
    C("capture_stream_synchronize", lambda e: capture(e, e.ctx.default_stream.synchronize),
      CaptureError, "synchronize()"),
    C("capture_record_event", lambda e: capture(e, e.ctx.default_stream.record),
      CaptureError, "record()"),
    C("capture_event_synchronize",
      lambda e: (lambda ev: capture(e, ev.synchronize))(e.ctx.default_stream.record()),
      CaptureError, "Event.synchronize()"),
    C("capture_nested", _nested_capture, CaptureError, "captures do not nest"),
    C("capture_with_stream", _with_stream_in_capture, CaptureError,
      "inside ctx.capture()"),
    C("capture_replay_inside", _replay_in_capture, CaptureError, "graphs do not nest"),
    C("capture_after_close", lambda e: e.closed_context().capture().__enter__(),
      ContextClosed, "was closed"),
    C("graph_replay_empty", _empty_graph_replay, VkumdError, "captured no work"),
    C("graph_replay_released", _released_graph_replay, VkumdError, "graph was released"),
    C("graph_replay_stream_int", lambda e: e.graph().replay(stream=42), TE,
      "takes a vkumd Stream"),
    C("graph_replay_stream_of_other_context",
      lambda e: e.graph().replay(stream=e.other.default_stream), VkumdError,
      "graph's context"),
    C("capture_op_on_other_context",
      lambda e: (lambda a, b: capture(e, lambda: ops.add(a, b)))(e.t(), e.t(ctx=e.other)), VE,
      "different context"),
]

CASES = CONTEXT + FACTORIES + TENSOR + METHODS + MEMORY + STREAMS + CAPTURE
