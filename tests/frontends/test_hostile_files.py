"""ONNX files as untrusted input: tiny files that expand, FIFOs, malformed graphs and tensors,
external data outside the model's directory, garbage bytes.

A case that could hang or allocate gigabytes on a regression runs in a child process
(``tests/isolated.py``) with a timeout and an address-space limit.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from isolated import run_isolated  # noqa: E402
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx_models import Net, erf_gelu  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdError  # noqa: E402
from vkumd.framework.frontends.onnx.errors import (  # noqa: E402
    MalformedGraphError,
    OnnxFileError,
    UnsupportedModelError,
)
from vkumd.models import ModelFileError  # noqa: E402

_F = helper.make_tensor_value_info


def _model(nodes: list, inputs: list | None = None, outputs: list | None = None,
           initializers: list | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs if inputs is not None else [
        _F("x", T.FLOAT, [2, 3])], outputs if outputs is not None else [
        _F("y", T.FLOAT, None)], initializer=initializers or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _bomb() -> bytes:
    """The 152-byte-class model: a ConstantOfShape of [16000, 16000] float32 (1 GiB)."""
    shape = numpy_helper.from_array(np.array([16000, 16000], np.int64), "s")
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="bomb")
    graph = helper.make_graph([node], "g", [], [_F("y", T.FLOAT, None)], initializer=[shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]
                             ).SerializeToString()


def test_a_tiny_file_cannot_fold_into_gigabytes(tmp_path: Path) -> None:
    path = tmp_path / "bomb.onnx"
    path.write_bytes(_bomb())
    assert len(path.read_bytes()) < 200
    done = run_isolated(
        "import vkumd.onnx\nfrom vkumd.errors import VkumdError",
        f"""
        try:
            vkumd.onnx.load({str(path)!r})
        except VkumdError as exc:
            print("refused:", type(exc).__name__, exc)
        """, timeout=120, address_space_gib=8)
    assert done.returncode == 0, done.stderr
    assert f"refused: UnsupportedModelError {path}: 1 node(s) cannot be imported" in done.stdout
    assert "ConstantOfShape node 'bomb'" in done.stdout
    assert "1024000000 bytes" in done.stdout and "VKUMD_FOLD_LIMIT" in done.stdout
    assert done.growth_mib < 128, f"peak RSS grew by {done.growth_mib:.0f} MiB"


def _generator(op: str, inputs: dict[str, np.ndarray]) -> bytes:
    inits = [numpy_helper.from_array(v, k) for k, v in inputs.items()]
    node = helper.make_node(op, list(inputs), ["y"], name="gen")
    graph = helper.make_graph([node], "g", [], [_F("y", T.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]
                             ).SerializeToString()


def test_every_small_op_that_makes_a_big_constant_is_refused() -> None:
    i64 = np.int64
    models = {
        "Range": _generator("Range", {"a": np.array(0, i64), "b": np.array(10**9, i64),
                                      "c": np.array(1, i64)}),
        "Tile": _generator("Tile", {"x": np.ones((1, 4), np.float32),
                                    "r": np.array([10**8, 1], i64)}),
        "Expand": _generator("Expand", {"x": np.ones((1,), np.float32),
                                        "s": np.array([16000, 16000], i64)}),
        "OneHot": _generator("OneHot", {"i": np.zeros(1000, i64), "d": np.array(10**6, i64),
                                        "v": np.array([0, 1], np.float32)}),
    }
    done = run_isolated(
        "import vkumd.onnx\nfrom vkumd.errors import VkumdError",
        f"""
        for op, data in {models!r}.items():
            try:
                vkumd.onnx.import_model(data)
                print(op, "imported")
            except VkumdError as exc:
                print(op, "refused:", str(exc).replace("\\n", " "))
        """, timeout=120, address_space_gib=8)
    assert done.returncode == 0, done.stderr
    for op in models:
        line = next(x for x in done.stdout.splitlines() if x.startswith(op))
        if op in ("Tile", "OneHot"):  # device ops: left to the device, nothing made on the host
            assert line == f"{op} imported", line
            continue
        assert f"{op} node 'gen'" in line and "more than the fold limit" in line, line
    assert done.growth_mib < 128, f"peak RSS grew by {done.growth_mib:.0f} MiB"


def test_a_value_computed_from_the_sizes_is_bounded_too() -> None:
    # ConstantOfShape of [seq, 10**7]: a Derived value, probed at import at seq of ~100
    # (4 GB), then computed per call. It must be refused before it is allocated.
    shape_tail = numpy_helper.from_array(np.array([10**7], np.int64), "tail")
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             helper.make_node("Concat", ["s", "tail"], ["dims"], axis=0),
             helper.make_node("ConstantOfShape", ["dims"], ["c"], name="mask"),
             helper.make_node("ReduceSum", ["c"], ["r"], keepdims=0),
             helper.make_node("Add", ["x", "r"], ["y"])]
    model = _model(nodes, inputs=[_F("x", T.FLOAT, ["batch", "seq"])],
                   initializers=[shape_tail])
    done = run_isolated(
        "import vkumd.onnx\nfrom vkumd.errors import VkumdError",
        f"""
        try:
            vkumd.onnx.import_model({model.SerializeToString()!r})
            print("imported")
        except VkumdError as exc:
            print("refused:", str(exc).replace("\\n", " "))
        """, timeout=120, address_space_gib=8)
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "ConstantOfShape node 'mask'" in done.stdout
    assert "more than the fold limit" in done.stdout, done.stdout
    assert done.growth_mib < 128, f"peak RSS grew by {done.growth_mib:.0f} MiB"


def test_a_value_computed_from_the_sizes_is_bounded_on_each_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # [seq, 1000] float32 zeros: 404 KB at the import probes, 4 MB at seq=1000.
    monkeypatch.setenv("VKUMD_FOLD_LIMIT", "1MiB")
    tail = numpy_helper.from_array(np.array([1000], np.int64), "tail")
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             helper.make_node("Concat", ["s", "tail"], ["dims"], axis=0),
             helper.make_node("ConstantOfShape", ["dims"], ["c"], name="mask"),
             helper.make_node("ReduceSum", ["c", "axis"], ["r"], keepdims=0),
             helper.make_node("Add", ["x", "r"], ["y"])]
    axis = numpy_helper.from_array(np.array([1], np.int64), "axis")
    model = vkumd.onnx.load(_model(nodes, inputs=[_F("x", T.FLOAT, ["batch", "seq"])],
                                   initializers=[tail, axis]))
    x = np.ones((2, 8), np.float32)
    np.testing.assert_array_equal(model.evaluate(x=x)["y"], x)
    with pytest.raises(VkumdError, match=r"ConstantOfShape node 'mask' at the sizes "
                       r"\{.*'seq': 1000.*\}: its result would take 4000000 bytes"):
        model.evaluate(x=np.ones((2, 1000), np.float32))
    np.testing.assert_array_equal(model.evaluate(x=x)["y"], x)  # still usable


def test_a_big_result_from_an_op_with_a_kernel_stays_device_work() -> None:
    # [4000, 1] + [1, 4000] of known values: 64 MB folded; at a 1 MiB limit it must be an add
    # node on two small weights instead.
    a = numpy_helper.from_array(np.arange(4000, dtype=np.float32).reshape(4000, 1), "a")
    b = numpy_helper.from_array(np.ones((1, 4000), np.float32), "b")
    model = _model([helper.make_node("Add", ["a", "b"], ["s"]),
                    helper.make_node("ReduceSum", ["s"], ["y"], keepdims=0)],
                   inputs=[], initializers=[a, b])
    body = f"""
        import numpy as np, onnx
        from vkumd.framework.graph import run_passes
        model = onnx.load_from_string({model.SerializeToString()!r})
        imported = vkumd.onnx.import_model(model)
        graph = run_passes(imported.graph)
        print("ops:", sorted({{n.op for n in graph.nodes}}))
        print("biggest weight:", max(w.data.size for w in graph.weights))
        print("value:", float(vkumd.onnx.load(model).evaluate()["y"]))
        """
    done = run_isolated("import vkumd.onnx", body, timeout=120,
                        env={"VKUMD_FOLD_LIMIT": "1MiB"})
    assert done.returncode == 0, done.stderr
    assert "'add'" in done.stdout, done.stdout
    assert "biggest weight: 4000\n" in done.stdout, done.stdout
    want = (np.arange(4000, dtype=np.float64)[:, None] + np.ones((1, 4000))).sum()
    assert float(done.stdout.split("value:")[1]) == pytest.approx(want, rel=1e-5)


def test_the_graph_pass_does_not_fold_past_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from vkumd.framework.graph import GraphBuilder
    from vkumd.framework.graph.constant_folding import fold_constants

    b = GraphBuilder()
    x = b.input("x", (64, 64))
    w = b.weight("w", np.ones((64, 64), np.float32))
    b.output(b.add(x, b.transpose(w, 0, 1)))
    monkeypatch.setenv("VKUMD_FOLD_LIMIT", "1KiB")
    assert "transpose" in [n.op for n in fold_constants(b.build()).nodes]
    monkeypatch.setenv("VKUMD_FOLD_LIMIT", "1MiB")
    assert "transpose" not in [n.op for n in fold_constants(b.build()).nodes]


def test_a_bad_fold_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from vkumd import settings

    monkeypatch.setenv("VKUMD_FOLD_LIMIT", "lots")
    with pytest.raises(VkumdError, match=r"VKUMD_FOLD_LIMIT: cannot read 'lots' as a size"):
        settings.fold_limit()


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    done = run_isolated(
        "import vkumd.onnx\nfrom vkumd.errors import VkumdError",
        f"""
        try:
            vkumd.onnx.load({str(fifo)!r})
        except VkumdError as exc:
            print("refused:", type(exc).__name__, exc)
        """, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"refused: OnnxFileError {fifo}: this is a FIFO (named pipe)" in done.stdout


@pytest.mark.parametrize("data, text", [
    (b"", r"the model bytes: the model has no graph"),
    (b"\xff" * 64, r"the model bytes: not an ONNX model: protobuf cannot decode it"),
    (_bomb()[:-20], r"the model bytes: not an ONNX model|has no graph"),
    (b"\x0a\x05hello" * 10, r"not an ONNX model|has no graph"),
])
def test_garbage_and_truncated_bytes(data: bytes, text: str) -> None:
    with pytest.raises(OnnxFileError, match=text):
        vkumd.onnx.import_model(data)


def test_a_deeply_nested_file_is_a_typed_error(tmp_path: Path) -> None:
    # A graph in an attribute of a node of a graph..., 2000 deep: protobuf's nesting limit
    # answers, as a typed error, not a RecursionError or a crash.
    graph = b""
    for _ in range(2000):
        attr = b"\x32" + _varint(len(graph)) + graph  # AttributeProto.g (field 6)
        node = b"\x2a" + _varint(len(attr)) + attr  # NodeProto.attribute (field 5)
        graph = b"\x0a" + _varint(len(node)) + node  # GraphProto.node (field 1)
    path = tmp_path / "deep.onnx"
    path.write_bytes(b"\x3a" + _varint(len(graph)) + graph)  # ModelProto.graph (field 7)
    with pytest.raises(OnnxFileError, match=r"deep.onnx: not an ONNX model: protobuf cannot "
                       "decode it"):
        vkumd.onnx.load(path)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _relu(i: str, o: str, name: str = "") -> onnx.NodeProto:
    return helper.make_node("Relu", [i], [o], name=name)


@pytest.mark.parametrize("nodes, inputs, outputs, inits, text", [
    ([_relu("x", "y", "a"), _relu("x", "y", "b")], None, None, None,
     r"Relu node 'a' and Relu node 'b' both write 'y'"),
    ([_relu("x", "x", "a"), _relu("x", "y")], None, None, None,
     r"Relu node 'a' writes 'x', which is a graph input"),
    ([_relu("x", "w", "a"), _relu("w", "y")], None, None,
     [numpy_helper.from_array(np.ones((2, 3), np.float32), "w")],
     r"Relu node 'a' writes 'w', which is a initializer|Relu node 'a' writes 'w', which is a"),
    ([_relu("x", "y")], None, [_F("y", T.FLOAT, None), _F("z", T.FLOAT, None)], None,
     r"declares output 'z', but no node, input or initializer produces it"),
    ([_relu("x", "t", "a"), helper.make_node("Add", ["t", "u"], ["y"], name="b"),
      _relu("y", "u", "c")], None, None, None, r"the nodes form a cycle: Add node 'b' reads"),
    ([_relu("nowhere", "y", "a")], None, None, None,
     r"Relu node 'a' reads 'nowhere', which no node, graph input or initializer defines"),
    ([_relu("x", "y", "a")], [_F("x", T.FLOAT, [2]), _F("x", T.FLOAT, [2])], None, None,
     r"two graph inputs are named 'x'"),
])
def test_malformed_graphs_are_refused_by_node_and_name(nodes, inputs, outputs, inits, text
                                                      ) -> None:
    model = _model(nodes, inputs, outputs, inits)
    with pytest.raises(MalformedGraphError, match=text) as info:
        vkumd.onnx.import_model(model.SerializeToString())
    assert "the model bytes" in str(info.value)


def test_nodes_out_of_order_are_sorted_as_onnxruntime_does() -> None:
    model = _model([helper.make_node("Neg", ["t"], ["y"]), _relu("x", "t")])
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    got = vkumd.onnx.load(model).evaluate(x=x)["y"]
    np.testing.assert_array_equal(got, -np.maximum(x, 0))


def _tensor(dims: list[int], data_type: int = T.FLOAT, raw: bytes | None = b"\0\0\0\0",
            floats: list[float] | None = None) -> onnx.TensorProto:
    t = onnx.TensorProto(name="w", data_type=data_type, dims=dims)
    if raw is not None:
        t.raw_data = raw
    if floats is not None:
        t.float_data.extend(floats)
    return t


@pytest.mark.parametrize("tensor, text", [
    (_tensor([10**12]), r"initializer 'w': a FLOAT tensor of dims \[1000000000000\] needs "
     r"4000000000000 bytes of raw_data, the file holds 4"),
    (_tensor([-4]), r"initializer 'w' has dims \[-4\]"),
    (_tensor([1], data_type=999), r"initializer 'w' has data_type 999, which is not an ONNX"),
    (_tensor([3], raw=None, floats=[1.0]), r"needs 3 values, the file holds 1"),
    (_tensor([2**40, 2**40, 0]), r"has dims|needs 0 bytes"),
    (_tensor([1] * 100), r"at most 64 of them"),
])
def test_initializers_whose_size_claims_are_false(tensor: onnx.TensorProto, text: str) -> None:
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], initializers=[tensor])
    with pytest.raises(OnnxFileError, match=text):
        vkumd.onnx.import_model(model.SerializeToString())


def test_constant_nodes_are_checked_like_initializers() -> None:
    node = helper.make_node("Constant", [], ["w"], value=_tensor([10**9]), name="c")
    model = _model([node, helper.make_node("Add", ["x", "w"], ["y"])])
    with pytest.raises(OnnxFileError, match=r"Constant node 'c' attribute 'value': a FLOAT "
                       r"tensor of dims \[1000000000\] needs 4000000000 bytes"):
        vkumd.onnx.import_model(model.SerializeToString())


def _external(location: str, length: int | None = 24, offset: int = 0) -> onnx.ModelProto:
    t = onnx.TensorProto(name="w", data_type=T.FLOAT, dims=[2, 3])
    t.data_location = T.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", None if length is None else str(length))):
        if value is not None:
            t.external_data.add(key=key, value=value)
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], initializers=[t])


def test_external_data_inside_the_directory_is_read(tmp_path: Path) -> None:
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    (tmp_path / "weights.bin").write_bytes(b"\0" * 8 + w.tobytes())
    (tmp_path / "m.onnx").write_bytes(_external("weights.bin", offset=8).SerializeToString())
    x = np.ones((2, 3), np.float32)
    got = vkumd.onnx.load(tmp_path / "m.onnx").evaluate(x=x)["y"]
    np.testing.assert_array_equal(got, x + w)


@pytest.mark.parametrize("location, length, text", [
    ("../outside.bin", 24, r"names external data '../outside.bin', which is not a file "
     "inside the model's directory"),
    ("/etc/passwd", 24, r"names external data '/etc/passwd', which is not a file inside"),
    ("link.bin", 24, r"names external data 'link.bin', which is not a file inside"),
    ("weights.bin", 8, r"dims \[2, 3\] need 24 bytes .* \(length field 8\)"),
    ("short.bin", None, r"need 24 bytes of .*short.bin from offset 0 .*the file has 4 bytes"),
    ("nothere.bin", 24, r"nothere.bin: the file is missing"),
    ("sub", 24, r"sub: this is a directory"),
])
def test_external_data_that_leaves_the_directory_or_lies(tmp_path: Path, location: str,
                                                        length: int | None, text: str) -> None:
    root = tmp_path / "model"
    root.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"\0" * 24)
    (root / "link.bin").symlink_to(tmp_path / "outside.bin")
    (root / "weights.bin").write_bytes(b"\0" * 24)
    (root / "short.bin").write_bytes(b"\0" * 4)
    (root / "sub").mkdir()
    (root / "m.onnx").write_bytes(_external(location, length).SerializeToString())
    with pytest.raises(OnnxFileError, match=text) as info:
        vkumd.onnx.load(root / "m.onnx")
    assert "m.onnx" in str(info.value) or location in str(info.value)


def test_external_data_without_a_directory_is_refused() -> None:
    with pytest.raises(OnnxFileError, match=r"keeps its data in an external file.*pass the "
                       r"\.onnx file's path"):
        vkumd.onnx.import_model(_external("weights.bin").SerializeToString())


@pytest.mark.parametrize("attribute, text", [
    (helper.make_attribute("axis", "one"), r"Softmax node 's': "),
    (onnx.AttributeProto(name="axis", type=onnx.AttributeProto.UNDEFINED), r"Softmax node 's'"),
])
def test_attributes_of_the_wrong_type_are_refusals(attribute, text: str) -> None:
    node = helper.make_node("Softmax", ["x"], ["y"], name="s")
    node.attribute.append(attribute)
    with pytest.raises(VkumdError, match=text):
        vkumd.onnx.import_model(_model([node]).SerializeToString())


def test_negative_input_dims_are_refused() -> None:
    model = _model([_relu("x", "y")], inputs=[_F("x", T.FLOAT, [2, -3])])
    with pytest.raises(OnnxFileError, match=r"graph input 'x' has dim 1 = -3"):
        vkumd.onnx.import_model(model.SerializeToString())


def test_model_file_errors_share_the_loaders_base() -> None:
    assert vkumd.onnx.OnnxFileError is OnnxFileError
    assert vkumd.onnx.MalformedGraphError is MalformedGraphError
    assert issubclass(OnnxFileError, ModelFileError)
    assert issubclass(MalformedGraphError, OnnxFileError)


def _node(op: str, inputs: list[str], outputs: tuple[str, ...] = ("y",), **attrs) -> list:
    return [helper.make_node(op, inputs, list(outputs), name="n", **attrs)]


@pytest.mark.parametrize("nodes, outputs, opset, error, text", [
    (_node("Relu", ["x"]), [_F("y", T.UNDEFINED, None)], 17, MalformedGraphError,
     r"declares output 'y' with element type 0"),
    (_node("Relu", ["x"]), [_F("y", T.INT64, None)], 17, MalformedGraphError,
     r"declares output 'y' as INT64, but computes it as float32"),
    (_node("Relu", ["x"]), [_F("y", T.COMPLEX64, None)], 17, UnsupportedModelError,
     r"graph output node 'y': COMPLEX64 tensors are not supported"),
    (_node("ReduceMax", ["x"], keepdims=3), None, 17, MalformedGraphError,
     r"ReduceMax node 'n': attribute 'keepdims' = 3, but it is a boolean"),
    (_node("Gemm", ["x", "x"], transB=-1), None, 17, MalformedGraphError,
     r"attribute 'transB' = -1"),
    (_node("Erf", ["x"]), None, 7, MalformedGraphError,
     r"Erf node 'n': operator 'Erf' is not defined at the model's opset 7; it exists from "
     r"opset 9"),
    (_node("Add", ["x", "x"]), None, 6, UnsupportedModelError,
     r"Add node 'n': at opset 6 it broadcasts as ONNX did before opset 7"),
    (_node("Relu", ["x"]), None, 99, OnnxFileError, r"imports opset 99 of ONNX's default"),
    (_node("Relu", ["x"]), None, 0, OnnxFileError, r"imports opset 0 of ONNX's default"),
    (_node("MatMul", ["x", "x", "x"]), None, 17, MalformedGraphError,
     r"MatMul node 'n' has 3 inputs; MatMul \(opset 17\) takes 2"),
    (_node("Add", ["x"]), None, 17, MalformedGraphError, r"Add node 'n' has 1 inputs"),
    (_node("Relu", ["x"], ("y", "z")), None, 17, MalformedGraphError,
     r"Relu node 'n' has 2 outputs; Relu \(opset 17\) takes 1"),
])
def test_nodes_and_outputs_are_checked_against_onnx_schemas(nodes, outputs, opset, error,
                                                            text: str) -> None:
    model = _model(nodes, outputs=outputs)
    model.opset_import[0].version = opset
    with pytest.raises(error, match=text):
        vkumd.onnx.load(model.SerializeToString())


def test_an_undeclared_attribute_is_refused_inside_a_fused_idiom() -> None:
    n = Net()
    out = erf_gelu(n, "x")
    n.nodes[-1].attribute.append(helper.make_attribute("axis", 1))
    with pytest.raises(UnsupportedModelError, match=r"Mul node 'mul_\d+': attribute 'axis' "
                       r"is not declared by Mul at opset 17"):
        vkumd.onnx.load(n.model([_F("x", T.FLOAT, [2, 3])], [out]))


def test_declared_output_types_stored_otherwise_are_restored() -> None:
    shape = helper.make_node("Shape", ["x"], ["s"])
    cast = helper.make_node("Cast", ["x"], ["b"], to=T.BOOL)
    model = _model([shape, cast], outputs=[_F("s", T.INT64, None), _F("b", T.BOOL, None)])
    got = vkumd.onnx.load(model.SerializeToString()).evaluate(
        x=np.array([[0, 1, 2], [3, 0, 5]], np.float32))
    assert got["s"].dtype == np.int64 and got["s"].tolist() == [2, 3]
    assert got["b"].dtype == np.bool_ and got["b"].tolist() == [[0, 1, 1], [1, 0, 1]]
