"""``load_exported``: a ``torch.export.ExportedProgram`` compiled for vkumd.

The program's graph is aten-level already (``linear``, ``layer_norm`` and
``scaled_dot_product_attention`` stay whole); its parameters, buffers and constants are
weights. Sizes exported as dynamic (``dynamic_shapes=``) are symbolic dimensions of the IR,
named as torch names them (``s0``, ...), so one compiled graph serves every size; vkumd
records one replay per shape bucket (powers of two unless ``buckets=`` says otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from vkumd.framework.frontends.torch.backend import compile_aten
from vkumd.framework.frontends.torch.support import INPUT, WEIGHT


class ExportedModule:
    """An exported program on vkumd; call it as the exported module (torch tensors).

    Attributes:
        program: the ExportedProgram.
        runner: what runs the graph (a :class:`VkumdGraphModule`, or a partitioned FX
            module when some ops run in torch).
    """

    def __init__(self, program: torch.export.ExportedProgram, *, partition: bool = True,
                 **options: Any) -> None:
        self.program = program
        sig = program.graph_signature
        gm = program.graph_module
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        kinds: dict[str, str] = {}
        self._fixed: dict[int, Any] = {}
        self._user: list[int] = []
        for i, (node, spec) in enumerate(zip(placeholders, sig.input_specs, strict=True)):
            if spec.kind == InputKind.USER_INPUT:
                kinds[node.name] = INPUT
                self._user.append(i)
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
                kinds[node.name] = WEIGHT
                self._fixed[i] = program.state_dict.get(spec.target,
                                                        program.constants.get(spec.target))
            else:  # lifted constants (CONSTANT_TENSOR) and the like
                kinds[node.name] = WEIGHT
                self._fixed[i] = program.constants[spec.target]
        self._count = len(placeholders)
        self._outputs = [i for i, spec in enumerate(sig.output_specs)
                         if spec.kind == OutputKind.USER_OUTPUT]
        self._out_spec = program.call_spec.out_spec
        self.runner = compile_aten(gm, kinds, partition=partition, name="exported", **options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run on tensors laid out as the exported example inputs.

        Raises:
            TypeError: a different number of tensors than the program takes.
        """
        flat, _ = pytree.tree_flatten((args, kwargs))
        if len(flat) != len(self._user):
            raise TypeError(f"the exported program takes {len(self._user)} input tensors, "
                            f"got {len(flat)}")
        values: list[Any] = [None] * self._count
        for i, v in self._fixed.items():
            values[i] = v
        for i, v in zip(self._user, flat, strict=True):
            values[i] = v
        out = list(self.runner(*values))
        result = [out[i] for i in self._outputs]
        if self._out_spec is None:
            return result[0] if len(result) == 1 else tuple(result)
        return pytree.tree_unflatten(result, self._out_spec)


def load_exported(program: torch.export.ExportedProgram, *, ctx: Any = None,
                  passes: Sequence[str] | None = None, disable: Sequence[str] | None = None,
                  buckets: Any = None, copy_outputs: bool = True,
                  partition: bool = True) -> ExportedModule:
    """Compile ``torch.export.export(model, args)`` for vkumd.

    Args:
        program: the exported program.
        ctx, passes, disable, buckets, copy_outputs, partition: as
            :func:`vkumd.torch.make_backend`.

    Returns:
        The :class:`ExportedModule` (converted on its first call, which reads the weights).
    """
    return ExportedModule(program, partition=partition, ctx=ctx, passes=passes,
                          disable=disable, buckets=buckets, copy_outputs=copy_outputs)
