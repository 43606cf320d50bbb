"""Symbolic sizes through strided windows, without a device: a size declared as a multiple of
a symbol (``32*h``) keeps its symbol through strided convolutions and pooling, equal to the
concrete rule at every value; sizes the stride does not divide are refused; a call's sizes
solve the symbol (or are refused with how to pad); ``dynamic=`` takes the new forms."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from vkumd.errors import VkumdError, VkumdTypeError, VkumdValueError
from vkumd.framework.execute.buckets import BucketPolicy, bind_symbols
from vkumd.framework.graph import GraphBuilder, evaluate
from vkumd.framework.graph.dims import Dim, as_dim, linear, parse_dim, sym
from vkumd.framework.graph.trace import input_types
from vkumd.framework.graph.trace_errors import TraceError
from vkumd.framework.opset.conv import conv2d_reference, window_size

H = sym("h")


def concrete(size: int, kernel: int, stride: int, dilation: int, before: int, after: int,
             ceil: bool) -> int | None:
    """The window count by counting window starts (independent of window_size), None when
    the padded input is shorter than the kernel."""
    span = dilation * (kernel - 1) + 1
    padded = size + before + after
    if padded < span:
        return None
    if not ceil:
        return len(range(0, padded - span + 1, stride))
    # ceil mode: a window may overhang the trailing end, but must start inside the input
    # or its leading pad.
    return len([s for s in range(0, padded - span + stride, stride) if s < size + before])


@pytest.mark.parametrize("ceil", [False, True])
def test_symbolic_windows_equal_the_concrete_rule_at_every_value(ceil: bool) -> None:
    checked = 0
    for coeff, shift, kernel, stride, dilation, (before, after) in itertools.product(
            (1, 2, 4, 6, 8, 32), (-3, 0, 1, 5), (1, 2, 3, 5), (1, 2, 3, 4), (1, 2),
            ((0, 0), (1, 1), (2, 1), (0, 3))):
        size = coeff * H + shift
        if coeff % stride:
            with pytest.raises(VkumdValueError, match="does not divide it for every value"):
                window_size("conv2d", size, kernel, stride, dilation, before, after, "height",
                            ceil)
            continue
        out = window_size("conv2d", size, kernel, stride, dilation, before, after, "height",
                          ceil)
        assert isinstance(out, Dim) and linear(out) is not None, out
        for h in range(12):
            if coeff * h + shift < 0:
                continue
            n = coeff * h + shift
            want = concrete(n, kernel, stride, dilation, before, after, ceil)
            if want is None:
                continue  # refused concretely; the ops refuse it at the true size
            got = out.bind({"h": h})
            assert got == window_size("conv2d", n, kernel, stride, dilation, before, after,
                                      "height", ceil), (size, kernel, stride, before, after, h)
            if not ceil or max(before, after) < dilation * (kernel - 1) + 1:
                # (ceil mode is the pools', whose pads stay below the kernel's span)
                assert got == want, (size, kernel, stride, dilation, before, after, h)
            checked += 1
    assert checked > 2000


def test_products_and_two_symbols_divide_term_by_term() -> None:
    size = 4 * sym("b") * H + 8 * sym("w") + 2
    out = window_size("max_pool2d", size, 3, 2, 1, 1, 1, "height")
    for b, h, w in itertools.product(range(1, 4), range(4), range(4)):
        n = 4 * b * h + 8 * w + 2
        assert out.bind({"b": b, "h": h, "w": w}) == concrete(n, 3, 2, 1, 1, 1, False)
    with pytest.raises(VkumdValueError, match="stride 2 does not divide"):
        window_size("max_pool2d", size + sym("x"), 3, 2, 1, 1, 1, "height")


def test_a_network_halves_32h_five_times() -> None:
    b = GraphBuilder("strided")
    x = b.input("x", (1, 3, "32*h", "32*w + 8"))
    rng = np.random.default_rng()
    y = x
    for c_in, c_out in ((3, 4), (4, 4), (4, 4), (4, 4)):
        y = b.op("conv2d", y, b.constant(rng.standard_normal((c_out, c_in, 3, 3)).astype(
            np.float32)), None, stride=(2, 2), pads=(1, 1, 1, 1))
    y = b.op("max_pool2d", y, kernel=(3, 3), stride=(2, 2), pads=(1, 1, 1, 1))
    b.output(y)
    graph = b.build()
    assert graph.outputs[0].shape[2:] == (H, sym("w") + 1)
    for h, w in ((1, 1), (2, 3)):
        data = rng.standard_normal((1, 3, 32 * h, 32 * w + 8)).astype(np.float32)
        assert evaluate(graph, {"x": data})[0].shape == (1, 4, h, w + 1)


def test_what_the_stride_does_not_divide_is_refused_with_how_to_declare_it() -> None:
    b = GraphBuilder("odd")
    x = b.input("x", (1, 3, "h", "32*w"))
    w = b.constant(np.ones((4, 3, 3, 3), np.float32))
    with pytest.raises(VkumdError, match=r"height is symbolic \(h\) and the stride 2 does not "
                       r"divide it.*multiple of the stride"):
        b.op("conv2d", x, w, None, stride=(2, 2), pads=(1, 1, 1, 1))
    b.op("conv2d", x, w, None, stride=(1, 2), pads=(1, 1, 1, 1))  # stride 1 takes any size
    y = b.input("y", (1, 3, "32*h", "32*w"))
    with pytest.raises(VkumdError, match=r"width is symbolic \(32\*w\) and the stride 3"):
        b.op("avg_pool2d", y, kernel=(3, 3), stride=(2, 3))


def test_string_forms_of_a_multiple() -> None:
    assert parse_dim("32*h") == 32 * H == as_dim("h*32") == as_dim(" 32 * h ")
    assert as_dim("32*h + 1") == 32 * H + 1
    assert as_dim("32*h - 3") == 32 * H - 3
    assert as_dim("h") == H
    assert linear(32 * H - 3) == ("h", 32, -3)
    assert linear(H * H) is None and linear(sym("a") + H) is None and linear(5) is None
    for bad in ("h*h", "32*h*2", "-32*h", "32*", "32 h", "h + w"):
        with pytest.raises(VkumdValueError, match="identifier such as 'h', or a multiple"):
            as_dim(bad)
    with pytest.raises(VkumdValueError, match="the multiple must be >= 1"):
        as_dim("0*h")


def graph_of(*dims: object) -> object:
    b = GraphBuilder("g")
    x = b.input("x", dims)
    b.output(b.relu(x))
    return b.build()


def test_a_call_solves_the_symbol_or_says_how_to_pad() -> None:
    graph = graph_of(1, "32*h", "32*w + 1")
    assert bind_symbols(graph, {"x": (1, 96, 65)}) == {"h": 3, "w": 2}
    with pytest.raises(VkumdValueError, match=r"axis 1 \(shape \(1, 100, 65\)\) is 100, which "
                       r"is not 32\*h for any whole h; pad it to a multiple of 32"):
        bind_symbols(graph, {"x": (1, 100, 65)})
    with pytest.raises(VkumdValueError, match=r"is 64, which is not 32\*w \+ 1 for any whole "
                       r"w; pad it to 32\*k \+ 1"):
        bind_symbols(graph, {"x": (1, 96, 64)})
    with pytest.raises(VkumdValueError, match=r"is 0, which is not 32\*w \+ 1"):
        bind_symbols(graph, {"x": (1, 96, 0)})  # w would be negative
    # The reference evaluator binds the same way (DimTable.unify).
    data = np.ones((1, 64, 33), np.float32)
    assert evaluate(graph, {"x": data})[0].shape == (1, 64, 33)
    with pytest.raises(VkumdValueError, match="not 32\\*h for any whole h"):
        evaluate(graph, {"x": np.ones((1, 63, 33), np.float32)})


def test_a_symbol_given_plainly_and_as_a_multiple_must_agree() -> None:
    b = GraphBuilder("two")
    x = b.input("x", ("32*h",))
    y = b.input("y", ("h",))
    b.output(b.relu(x), b.relu(y))
    graph = b.build()
    assert bind_symbols(graph, {"x": (64,), "y": (2,)}) == {"h": 2}
    with pytest.raises(VkumdValueError, match=r"declared 32\*h is 96"):
        bind_symbols(graph, {"x": (64,), "y": (3,)})
    # Buckets name the symbol, not the multiple.
    assert BucketPolicy(graph, {"h": None}).apply({"h": 5}) == {"h": 5}
    assert BucketPolicy(graph).apply({"h": 5}) == {"h": 8}


def test_trace_dynamic_takes_multiples() -> None:
    x = np.zeros((1, 3, 64, 96), np.float32)
    (shape, _), = input_types(["x"], [x], {"x": {2: "32*h", 3: 32 * sym("w")}})
    assert shape == (1, 3, 32 * H, 32 * sym("w"))
    with pytest.raises(VkumdValueError, match=r"axis 3 is 96, which is not 64\*w"):
        input_types(["x"], [x], {"x": {3: "64*w"}})
    with pytest.raises(TraceError, match="symbol 'h' is 2 in input 'x' but 3 in 'y'"):
        input_types(["x", "y"], [x, np.zeros((3,), np.float32)],
                    {"x": {2: "32*h"}, "y": {0: "h"}})
    with pytest.raises(TraceError, match="a symbol or a multiple of one"):
        input_types(["x"], [x], {"x": {2: H * H}})
    with pytest.raises(TraceError, match="a symbol is a name or a multiple"):
        input_types(["x"], [x], {"x": {2: 32}})
    with pytest.raises(VkumdTypeError):
        as_dim(2.5)


def test_the_float64_reference_of_a_strided_net_at_symbolic_sizes() -> None:
    """evaluate() of a symbolic strided conv graph equals the record's reference at each
    size (the shapes it infers are the ones the reference produces)."""
    rng = np.random.default_rng()
    w = rng.standard_normal((5, 3, 3, 3))
    b = GraphBuilder("ref")
    x = b.input("x", (2, 3, "16*h", "8*w + 3"))
    b.output(b.op("conv2d", x, b.constant(w.astype(np.float32)), None, stride=(2, 4),
                  pads=(1, 0, 0, 2)))
    graph = b.build()
    for h, wv in ((1, 0), (2, 1), (3, 4)):
        data = rng.standard_normal((2, 3, 16 * h, 8 * wv + 3)).astype(np.float32)
        got = evaluate(graph, {"x": data})[0]
        want = conv2d_reference(data, w.astype(np.float32), None, (2, 4), (1, 1),
                                (1, 0, 0, 2), 1)
        assert got.shape == want.shape == (2, 5, 8 * h, 2 * wv + 1)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
