"""Planning an LSTM, GRU or RNN layer: GEMMs and the cell kernel, every time step in one
plan.

The layer runs as:

1. one GEMM for the input projection of every step and direction, ``xw = X . W^T``
   (``X`` as ``[seq * batch, input]``, ``W`` as ``[dirs * G * H, input]``), into scratch;
2. per step, one batched GEMM over the directions, ``hr[d] = h[d] . R[d]^T``, reading the
   state where the previous step left it (``y_h``; ``initial_h`` at the first step, and no
   GEMM at all when there is no initial state), then one launch of the cell kernel
   (``shaders/recurrent.comp``) for every direction, which adds the biases, applies the gates
   and writes ``h`` (``Y``'s slice and ``Y_h``) and ``c`` (``Y_c``).

With a batch of a few rows on a CPU driver the per-step projection is the matvec kernel
(``shaders/recurrent_matvec.comp``, every direction in one launch) instead of the GEMM.
A GRU without ``linear_before_reset`` needs ``(r * h) . Rh^T``, so its step is two GEMMs
per direction (against ``R``'s ``[z, r]`` rows, then its ``h`` rows) around the kernel's two
halves. The steps are recorded back to back; the runtime puts them in one submission and
the hazard tracker orders each launch after the one whose output it reads.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vkumd.compiler.kernels.elementwise_plan import ELEMENTWISE_WORKGROUP, looped_grid
from vkumd.compiler.kernels.gemm_choice import GemmShape
from vkumd.compiler.kernels.gemm_plan import GemmLaunchPlan, GemmProblem, gemm_plan
from vkumd.compiler.kernels.recurrent import (
    ACTIVATION_SHIFT,
    CLIP,
    HAS_BIAS,
    HAS_C0,
    HAS_H0,
    HAS_HR,
    HAS_LENS,
    HAS_PEEPHOLES,
    INPUT_FORGET,
    MODES,
    RECURRENT,
    RECURRENT_CODES,
    RECURRENT_MATVEC,
    RECURRENT_MATVEC_PUSH,
    RECURRENT_PUSH,
    RNN_ACTIVATIONS,
)
from vkumd.compiler.launch import Launch, Operand
from vkumd.compiler.registry import WORKGROUP
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

GATES = {"lstm": 4, "gru": 3, "rnn": 1}
# On CPU drivers, batches of at most this many rows take the matvec kernel for the per-step
# projection instead of the GEMM, whose tiles hold 32 or more rows (shaders/recurrent_matvec
# .comp has the measurement). GPUs keep the GEMM: the matvec kernel is unmeasured there.
MATVEC_MAX_BATCH = 4
MATVEC_ON_GPU = False
# The kernel and the GEMM index with 32-bit unsigned integers.
_MAX_ELEMENTS = (1 << 32) - 1


@dataclass(frozen=True)
class RecurrentProblem:
    """One recurrent layer call, addresses aside.

    Attributes:
        cell: ``"lstm"``, ``"gru"`` or ``"rnn"``.
        dtype: every operand's dtype name.
        seq, batch, input, hidden, dirs: the sizes.
        reverse: bit ``d`` set: direction ``d`` walks the sequence backwards.
        bias, lens, peepholes, initial_h, initial_c: which optional operands are given
            (``lens``: sequence_lens).
        input_forget: LSTM's coupled input and forget gates.
        clip: the bound of every activation's input (None: none).
        linear_before_reset: GRU's variant that resets after the recurrent GEMM.
        align: each of x, w, r, initial_h and y_h's address modulo 16 bytes.
        activations: RNN's activation per direction (names in RNN_ACTIVATIONS).
    """

    cell: str
    dtype: str
    seq: int
    batch: int
    input: int
    hidden: int
    dirs: int
    reverse: int
    bias: bool
    lens: bool
    peepholes: bool
    initial_h: bool
    initial_c: bool
    input_forget: bool
    clip: float | None
    linear_before_reset: bool
    align: tuple[int, int, int, int, int]
    activations: tuple[str, ...] = ()


class _At:
    """An operand ``offset`` bytes into another: the same binding (so the hazard tracker
    sees the whole range it belongs to), its own address (the GEMM reads through it)."""

    __slots__ = ("binding", "address")

    def __init__(self, base: Operand, offset: int) -> None:
        self.binding = base.binding
        self.address = base.address + offset


def _gemm(caps: DeviceCaps, dtype: str, m: int, n: int, k: int, count: int,
          a_at: Sequence[int], b_at: Sequence[int]) -> GemmLaunchPlan:
    """``c[e] = a[e] . b[e]^T`` for ``count`` entries; ``a_at``/``b_at`` are the byte
    addresses (modulo 16) the plan may be run with."""
    itemsize = 4 if dtype == "float32" else 2
    batched = count > 1
    a8 = all(a % 8 == 0 for a in a_at) and (not batched or m * k * itemsize % 8 == 0)
    b8 = all(b % 8 == 0 for b in b_at) and (not batched or n * k * itemsize % 8 == 0)
    shape = GemmShape(m, n, k, False, True, a8, b8, all(a % 16 == 0 for a in a_at),
                      all(b % 16 == 0 for b in b_at), count)
    return gemm_plan(caps, GemmProblem(shape, dtype, itemsize))


@dataclass(frozen=True)
class _Matvec:
    """The per-step projection by the matvec kernel, every direction in one launch; its
    ``launches`` takes the GEMM's operands (h, r, hr, None, None) for the same product."""

    program: Any
    push: bytes
    groups: tuple[int, int, int]
    scratch: tuple[int, ...] = ()

    def launches(self, operands: Sequence[Operand | None],
                 scratch: Sequence[Operand] = ()) -> list[Launch]:
        h, r, hr = operands[:3]
        assert h is not None and r is not None and hr is not None
        return [Launch(self.program, (h.binding, r.binding, hr.binding), self.push,
                       self.groups, (2,))]


def _matvec(caps: DeviceCaps, p: RecurrentProblem, cols: int, r_rows: int, row0: int
            ) -> _Matvec:
    """``hr[d, b, :cols] = h[d, b] . R[d, row0:row0 + cols]^T`` for every direction."""
    width = 8 if caps.device_type == "cpu" else 64
    program = RECURRENT_MATVEC.specialize({"DTYPE": RECURRENT_CODES[p.dtype],
                                           WORKGROUP: width})
    push = RECURRENT_MATVEC_PUSH.pack(p.dirs, p.batch, p.hidden, cols, r_rows, row0)
    return _Matvec(program, push, looped_grid(caps, -(-p.dirs * cols // width)))


def recurrent_plan(caps: DeviceCaps, problem: RecurrentProblem) -> RecurrentPlan:
    """The launches of one LSTM, GRU or RNN layer (see the module's docstring).

    Operands: x, w, r, b, sequence_lens (int32), initial_h, initial_c, p, y, y_h, y_c (None
    when absent; GRU has no initial_c, p or y_c).

    Raises:
        VkumdValueError: no time step; a tensor past the kernels' 32-bit indexing.
    """
    matvec = ((caps.device_type == "cpu" or MATVEC_ON_GPU)
              and problem.batch <= MATVEC_MAX_BATCH)
    return _recurrent_plan(caps, problem, matvec)


@functools.lru_cache(maxsize=1024)
def _recurrent_plan(caps: DeviceCaps, problem: RecurrentProblem, matvec: bool
                    ) -> RecurrentPlan:
    p = problem
    if p.seq < 1:
        raise VkumdValueError(f"{p.cell}: the sequence has no time step (seq_length "
                              f"{p.seq}); give at least one")
    gates = GATES[p.cell]
    gh = gates * p.hidden
    e = 4 if p.dtype == "float32" else 2
    xw = p.seq * p.batch * p.dirs * gh
    if max(xw, p.seq * p.batch * max(p.input, p.dirs * p.hidden)) > _MAX_ELEMENTS:
        raise VkumdValueError(f"{p.cell}: the input projection has {xw} elements; the "
                              f"kernels index at most {_MAX_ELEMENTS} (split the sequence)")
    x_at, w_at, r_at, h0_at, yh_at = p.align
    x_gemm = _gemm(caps, p.dtype, p.seq * p.batch, p.dirs * gh, p.input, 1, (x_at,), (w_at,))
    h_at = (yh_at, h0_at) if p.initial_h else (yh_at,)
    split = p.cell == "gru" and not p.linear_before_reset
    steps: tuple[GemmLaunchPlan | _Matvec, ...]
    if matvec:
        steps = ((_matvec(caps, p, gh, gh, 0),) if not split else
                 (_matvec(caps, p, 2 * p.hidden, gh, 0),
                  _matvec(caps, p, p.hidden, gh, 2 * p.hidden)))
    if not split:
        if not matvec:
            steps = (_gemm(caps, p.dtype, p.batch, gh, p.hidden, p.dirs, h_at, (r_at,)),)
        mode = MODES[p.cell if p.cell in ("lstm", "rnn") else "gru_linear"]
        scratch = (xw * e, p.dirs * p.batch * gh * e)
    else:
        # Per direction: the state rows of one direction against R[d]'s z and r rows, then
        # r * h against its h rows (offsets of whole rows, so alignment is the row's).
        row = p.batch * p.hidden * e
        rows = p.hidden * p.hidden * e
        dirs_h = [(a + d * row) % 16 for a in h_at for d in range(p.dirs)]
        r_zr = [(r_at + d * 3 * rows) % 16 for d in range(p.dirs)]
        r_h = [(r_at + (d * 3 + 2) * rows) % 16 for d in range(p.dirs)]
        rh_at = [d * row % 16 for d in range(p.dirs)]
        if not matvec:
            steps = (_gemm(caps, p.dtype, p.batch, 2 * p.hidden, p.hidden, 1, dirs_h, r_zr),
                     _gemm(caps, p.dtype, p.batch, p.hidden, p.hidden, 1, rh_at, r_h))
        mode = MODES["gru_cell"]
        scratch = (xw * e, p.dirs * p.batch * 2 * p.hidden * e, p.dirs * row, p.dirs * row)
    base = len(scratch)
    for sub in (x_gemm, *steps):
        scratch += sub.scratch
    code = RECURRENT_CODES[p.dtype]
    cell = RECURRENT.specialize({"DTYPE": code, "MODE": mode, WORKGROUP: ELEMENTWISE_WORKGROUP})
    reset = (RECURRENT.specialize({"DTYPE": code, "MODE": MODES["gru_reset"],
                                   WORKGROUP: ELEMENTWISE_WORKGROUP}) if split else None)
    flags = ((HAS_BIAS if p.bias else 0) | (HAS_LENS if p.lens else 0)
             | (HAS_PEEPHOLES if p.peepholes else 0) | (HAS_H0 if p.initial_h else 0)
             | (HAS_C0 if p.initial_c else 0)
             | (INPUT_FORGET if p.input_forget else 0) | (CLIP if p.clip is not None else 0))
    for d, name in enumerate(p.activations):
        flags |= RNN_ACTIVATIONS.index(name) << (ACTIVATION_SHIFT + 2 * d)
    hr_cols = 2 * p.hidden if split else gh
    pushes = tuple(
        RECURRENT_PUSH.pack(p.seq, p.batch, p.hidden, p.dirs, s, p.reverse, hr_cols,
                            flags | (HAS_HR if s > 0 or p.initial_h else 0),
                            0.0 if p.clip is None else p.clip)
        for s in range(p.seq))
    total = p.dirs * p.batch * p.hidden
    groups = looped_grid(caps, -(-total // ELEMENTWISE_WORKGROUP))
    return RecurrentPlan(p, x_gemm, steps, cell, reset, pushes, groups, scratch, base)


@dataclass(frozen=True)
class RecurrentPlan:
    """The launches of one recurrent layer (a :class:`~vkumd.compiler.launch.LaunchPlan`).

    Scratch: the input projection, the recurrent projection (and for a split GRU step, r * h
    and its product with Rh), then the GEMMs' own scratch.

    Attributes:
        problem: the problem.
        x_gemm: the input projection's GEMM.
        steps: the per-step GEMM (batched over directions), or a split GRU step's two
            per-direction GEMMs.
        cell, reset: the cell kernel's variant, and the split GRU's first half (or None).
        pushes: the cell kernel's push constants, per step.
        groups: the cell kernel's grid.
        scratch: bytes of each scratch buffer.
        base: how many scratch buffers are the plan's own (the GEMMs' follow).
    """

    problem: RecurrentProblem
    x_gemm: GemmLaunchPlan
    steps: tuple[GemmLaunchPlan | _Matvec, ...]
    cell: Any
    reset: Any
    pushes: tuple[bytes, ...]
    groups: tuple[int, int, int]
    scratch: tuple[int, ...]
    base: int

    def launches(self, operands: Sequence[Operand | None],
                 scratch: Sequence[Operand] = ()) -> list[Launch]:
        """Every launch of the layer, in order."""
        p = self.problem
        x, w, r, b, lens, h0, c0, peep, y, y_h, y_c = (list(operands) + [None] * 11)[:11]
        assert y is not None and y_h is not None and r is not None
        own, rest = scratch[:self.base], list(scratch[self.base:])
        sub_scratch = []
        for sub in (self.x_gemm, *self.steps):
            sub_scratch.append(rest[:len(sub.scratch)])
            rest = rest[len(sub.scratch):]
        xw, hr = own[0], own[1]
        launches = self.x_gemm.launches((x, w, xw, None, None), sub_scratch[0])

        def bind(t: Operand | None) -> Any:
            return (t if t is not None else xw).binding

        common = [xw.binding, hr.binding, hr.binding, bind(b), bind(peep), bind(h0), bind(c0),
                  y.binding, y_h.binding, bind(y_c) if p.cell == "lstm" else y_h.binding,
                  bind(lens)]
        writes = (7, 8, 9) if p.cell == "lstm" else (7, 8)
        if self.reset is None:
            buffers = tuple(common)
            for s, push in enumerate(self.pushes):
                if s > 0 or h0 is not None:
                    launches += self.steps[0].launches((y_h if s > 0 else h0, r, hr, None, None),
                                                       sub_scratch[1])
                launches.append(Launch(self.cell, buffers, push, self.groups, writes))
            return launches
        rh, hr2 = own[2], own[3]
        e = 4 if p.dtype == "float32" else 2
        row, rows = p.batch * p.hidden * e, p.hidden * p.hidden * e
        common[2] = hr2.binding
        reset = list(common)
        reset[9] = rh.binding
        cell_buffers, reset_buffers = tuple(common), tuple(reset)
        zr, hh = self.steps
        for s, push in enumerate(self.pushes):
            has_state = s > 0 or h0 is not None
            if has_state:
                h = y_h if s > 0 else h0
                assert h is not None
                if isinstance(zr, _Matvec):  # every direction in one launch
                    launches += zr.launches((h, r, hr))
                else:
                    for d in range(p.dirs):
                        launches += zr.launches((_At(h, d * row), _At(r, d * 3 * rows),
                                                 _At(hr, d * 2 * row), None, None),
                                                sub_scratch[1])
                launches.append(Launch(self.reset, reset_buffers, push, self.groups, (9,)))
                if isinstance(hh, _Matvec):
                    launches += hh.launches((rh, r, hr2))
                else:
                    for d in range(p.dirs):
                        launches += hh.launches((_At(rh, d * row), _At(r, (d * 3 + 2) * rows),
                                                 _At(hr2, d * row), None, None),
                                                sub_scratch[2])
            launches.append(Launch(self.cell, cell_buffers, push, self.groups, writes))
        return launches
