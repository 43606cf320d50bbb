"""A model's nodes checked against ONNX's operator schemas (``onnx.defs``), as onnxruntime's
loader checks them: one pass over the main graph's nodes at load.

- every opset the model imports for ONNX's default domain is one the installed ``onnx``
  knows (1..``onnx.defs.onnx_opset_version()``);
- every node of the default domain names an operator defined at that opset, with as many
  inputs and outputs as it allows;
- attributes ONNX defines as booleans (``keepdims``, ``transA``...) are 0 or 1;
- every graph output declares an element type ONNX defines.

Nodes of other domains are left to the importer, which refuses the ones it does not know; it
also lists, with its other refusals, attributes a node's schema does not declare
(:func:`undeclared_attributes`) and elementwise ops of opsets before 7
(:func:`legacy_broadcast`).
"""

from __future__ import annotations

from functools import lru_cache

import onnx
from onnx import defs

from vkumd.framework.frontends.onnx.errors import MalformedGraphError, OnnxFileError

_DEFAULT_DOMAINS = ("", "ai.onnx")
# Integer attributes that ONNX's operators define as booleans (0 or 1), whichever operator
# declares them; any other value is refused, as onnxruntime refuses it.
BOOLEAN_ATTRIBUTES = frozenset((
    "allowzero", "broadcast", "ceil_mode", "center_point_box", "count_include_pad",
    "detect_negative", "detect_positive", "exclude_outside", "exclusive", "fmod",
    "input_forget", "interleaved", "inverse", "is_case_sensitive", "is_causal", "keepdims",
    "largest", "layout", "linear_before_reset", "new_axis", "noop_with_empty_axes", "onesided",
    "reverse", "saturate", "select_last_index", "sorted", "storage_order", "training_mode",
    "transA", "transB", "upper"))
_ELEMENT_TYPES = frozenset(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}


def node_label(node: onnx.NodeProto, index: int) -> str:
    """How messages name a node: its operator and its name (or its index in the file)."""
    return f"{node.op_type} node {node.name or f'#{index}'!r}"


def default_opset(model: onnx.ModelProto, where: str) -> int | None:
    """The opset the model imports for ONNX's default domain (None when it imports none).

    Raises:
        OnnxFileError: a default-domain opset outside what the installed ``onnx`` knows.
    """
    newest = defs.onnx_opset_version()
    version = None
    for entry in model.opset_import:
        if entry.domain not in _DEFAULT_DOMAINS:
            continue
        if not 1 <= entry.version <= newest:
            raise OnnxFileError(
                f"{where}: the model imports opset {entry.version} of ONNX's default domain; "
                f"the installed onnx knows opsets 1..{newest} (a newer model needs a newer "
                "onnx package; a version below 1 is a corrupt opset_import)")
        if version is None:
            version = int(entry.version)
    return version


def check_model(model: onnx.ModelProto, where: str) -> None:
    """Check the main graph's nodes and outputs against ONNX's schemas.

    Args:
        model: the model (its graph already checked as well formed).
        where: how messages name the model.

    Raises:
        OnnxFileError: a default-domain opset the installed ``onnx`` does not know.
        MalformedGraphError: a node whose operator does not exist at the model's opset, or
            whose attributes, inputs or outputs its schema does not allow; a graph output
            of no element type; naming the node, attribute or output.
    """
    opset = default_opset(model, where)
    for index, node in enumerate(model.graph.node):
        if node.domain not in _DEFAULT_DOMAINS:
            continue
        label = node_label(node, index)
        if opset is None:
            raise MalformedGraphError(f"{where}: {label} is of ONNX's default domain, but the "
                                      "model imports no opset for it (add an opset_import "
                                      "entry for domain '')")
        _check_node(node, _schema(node.op_type, opset, label, where), opset, label, where)
    for vi in model.graph.output:
        kind = vi.type.WhichOneof("value")
        if kind is None or (kind == "tensor_type"
                            and vi.type.tensor_type.elem_type not in _ELEMENT_TYPES):
            elem = vi.type.tensor_type.elem_type
            raise MalformedGraphError(
                f"{where}: the graph declares output {vi.name!r} with element type {elem}, "
                "which is not an ONNX element type (0 is UNDEFINED); declare the type the "
                "graph computes (e.g. FLOAT)")


def undeclared_attributes(node: onnx.NodeProto, opset: int) -> str | None:
    """Why a default-domain node's attributes are refused: those its schema at ``opset``
    does not declare (onnxruntime refuses them), or None when all are declared."""
    schema = _schema_at(node.op_type, opset)
    if schema is None:
        return None
    extra = sorted({a.name for a in node.attribute} - set(schema.attributes))
    if not extra:
        return None
    declared = ", ".join(sorted(schema.attributes)) or "none"
    return (f"attribute {', '.join(map(repr, extra))} is not declared by {node.op_type} at "
            f"opset {opset} (it declares: {declared}); remove it")


@lru_cache(maxsize=256)
def _schema_at(op_type: str, opset: int) -> defs.OpSchema | None:
    try:
        return defs.get_schema(op_type, max_inclusive_version=opset, domain="")
    except defs.SchemaError:
        return None


def legacy_broadcast(op_type: str, opset: int) -> bool:
    """Whether ONNX's ``op_type`` at ``opset`` broadcasts the pre-opset-7 way (only with its
    ``broadcast`` attribute, aligned at ``axis``), not as numpy does, which is what vkumd's
    converters implement."""
    schema = _schema_at(op_type, opset)
    return schema is not None and "broadcast" in schema.attributes


def _schema(op_type: str, opset: int, label: str, where: str) -> defs.OpSchema:
    schema = _schema_at(op_type, opset)
    if schema is not None:
        return schema
    versions = [s.since_version for s in defs.get_all_schemas_with_history()
                if s.name == op_type and s.domain == ""]
    since = (f"; it exists from opset {min(versions)}" if versions else
             "; ONNX has no such operator (misspelled, or of another domain)")
    raise MalformedGraphError(f"{where}: {label}: operator {op_type!r} is not defined at the "
                              f"model's opset {opset}{since}; fix the op or the model's "
                              "opset_import") from None


def _check_node(node: onnx.NodeProto, schema: defs.OpSchema, opset: int, label: str,
                where: str) -> None:
    what = f"{where}: {label}"
    for a in node.attribute:
        if a.name in BOOLEAN_ATTRIBUTES and a.type == onnx.AttributeProto.INT and a.i not in (
                0, 1):
            raise MalformedGraphError(f"{what}: attribute {a.name!r} = {a.i}, but it is a "
                                      "boolean in ONNX (0 or 1); set it to 0 or 1")
    for count, low, high, kind in (
            (len(node.input), schema.min_input, schema.max_input, "inputs"),
            (len(node.output), schema.min_output, schema.max_output, "outputs")):
        if not low <= count <= high:
            allowed = f"{low}" if low == high else f"{low}..{high}"
            raise MalformedGraphError(f"{what} has {count} {kind}; {node.op_type} (opset "
                                      f"{opset}) takes {allowed}; fix the node's {kind}")
