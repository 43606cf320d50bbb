"""The memory planner: liveness, in-place reuse, greedy placement; a property test that two
values alive at once never share bytes (except an in-place pair at its hand-over step)."""

from __future__ import annotations

import numpy as np
import pytest
from graph_dags import Program, bindings, programs
from hypothesis import given, settings

from vkumd.errors import VkumdValueError
from vkumd.framework.graph import GraphBuilder, GraphError, ValueKind, plan_memory, run_passes
from vkumd.framework.graph.ir import Graph
from vkumd.framework.graph.memory import MemoryPlan
from vkumd.framework.graph.registry import op_info

KIB = 1024


def chain(n: int) -> Graph:
    b = GraphBuilder()
    x = b.input("x", (16, 16))  # 1 KiB of float32
    y = x
    for _ in range(n):
        y = b.relu(y)
    b.output(y)
    return b.build()


def test_inplace_chain_needs_one_buffer() -> None:
    plan = plan_memory(chain(5))
    assert plan.arena_bytes == KIB and plan.intermediate_bytes == 4 * KIB
    assert len({a.offset for a in plan.allocations.values()}) == 1
    assert [a.reuses for a in plan.allocations.values()] == [None, 1, 2, 3]
    assert "arena 1.0 KiB for 4.0 KiB of intermediates (25%), 4 values, 3 in place" in \
        plan.report()


def test_without_inplace_a_chain_ping_pongs() -> None:
    plan = plan_memory(chain(5), inplace=False)
    assert plan.arena_bytes == 2 * KIB
    offsets = [a.offset for a in plan.allocations.values()]
    assert offsets[0] == offsets[2] and offsets[1] == offsets[3] and offsets[0] != offsets[1]


def test_inputs_outputs_weights_are_never_placed() -> None:
    g = chain(3)
    plan = plan_memory(g)
    placed = set(plan.allocations)
    assert g.inputs[0].id not in placed and g.outputs[0].id not in placed
    # The first relu may not overwrite the input x even though x dies there.
    assert plan.allocations[g.nodes[0].outputs[0].id].reuses is None


def test_inplace_needs_same_size_and_a_dying_input() -> None:
    b = GraphBuilder()
    x = b.input("x", (64,))
    a = b.relu(x)
    row = b.relu(b.input("row", (1,)))
    s = b.add(a, row)  # a dies here, same size as s: reused; row is smaller
    t = b.add(s, s)  # s dies here (read twice): reused
    keep = b.relu(t)
    u = b.mul(keep, t)  # t dies here (keep is the same size and dies too: one of them)
    v = b.sum(u)  # not an elementwise op: no reuse
    b.output(v, b.relu(keep))
    plan = plan_memory(b.build(), alignment=16)
    reuses = {vid: a.reuses for vid, a in plan.allocations.items()}
    assert reuses[s.id] == a.id and reuses[t.id] == s.id and reuses[keep.id] is None
    assert reuses[u.id] in (keep.id, t.id)
    assert op_info("sum").inplace is False and op_info("add").inplace is True


def test_greedy_best_fit_reuses_the_tightest_gap() -> None:
    b = GraphBuilder()
    x = b.input("x", (1024,))
    big = b.cast(x, "float16")  # 2 KiB
    small = b.sum(b.reshape(big, (4, 256)))  # reshape reuses big in place; 8 B sum
    big2 = b.cast(b.cast(x, "float16"), "float32")  # 2 KiB float16 then 4 KiB float32
    b.output(b.add(b.reshape(b.cast(small, "float32"), (4, 1)), b.reshape(big2, (4, 256))))
    plan = plan_memory(run_passes(b.build(), disable=["cse"]), alignment=256)
    check_plan(plan, run_passes(b.build(), disable=["cse"]))
    assert plan.arena_bytes < plan.intermediate_bytes


def test_symbols_need_sizes_and_alignment_is_a_power_of_two() -> None:
    b = GraphBuilder()
    x = b.input("x", ("batch", "seq", 384))
    b.output(b.sum(b.gelu(x)))
    g = b.build()
    with pytest.raises(VkumdValueError, match="needs sizes for seq"):
        plan_memory(g, {"batch": 2})
    plan = plan_memory(g, {"batch": 2, "seq": 10})
    assert plan.bindings == {"batch": 2, "seq": 10}
    assert plan.allocations[g.nodes[0].outputs[0].id].nbytes == 2 * 10 * 384 * 4
    with pytest.raises(GraphError, match="power of two"):
        plan_memory(g, {"batch": 2, "seq": 10}, alignment=48)


def test_schedule_must_be_topological() -> None:
    g = chain(3)
    g.nodes.reverse()
    with pytest.raises(GraphError, match="written later in the schedule"):
        plan_memory(g)


def check_plan(plan: MemoryPlan, g: Graph, binding_limit: int | None = None) -> None:
    """Every invariant of a plan of ``g`` (each arena within ``binding_limit``)."""
    kinds = {v.id: v.kind for v in g.values()}
    allocs = list(plan.allocations.values())
    assert {a.value for a in allocs} == {v for v, k in kinds.items()
                                         if k is ValueKind.INTERMEDIATE}
    assert sum(plan.arena_sizes) == plan.arena_bytes
    if binding_limit is not None:
        assert all(size <= binding_limit for size in plan.arena_sizes)
    for a in allocs:
        assert a.offset % plan.alignment == 0
        assert a.offset + a.nbytes <= plan.arena_sizes[a.arena]
        assert a.first <= a.last
    for i, a in enumerate(allocs):
        for c in allocs[i + 1:]:
            if not a.nbytes or not c.nbytes or a.arena != c.arena:
                continue
            in_time = a.first <= c.last and c.first <= a.last
            in_space = a.offset < c.offset + c.nbytes and c.offset < a.offset + a.nbytes
            if in_time and in_space:
                # Only an in-place hand-over: one is written where the other is last read.
                handover = ((c.reuses == a.value and a.last == c.first)
                            or (a.reuses == c.value and c.last == a.first))
                assert handover, f"%{a.value} and %{c.value} overlap: {a} {c}"
    node_at = {n.id: n for n in g.nodes}
    for a in allocs:
        if a.reuses is not None:
            node = node_at[plan.schedule[a.first]]
            info = op_info(node.op)
            slots = [j for j, v in enumerate(node.inputs) if v is not None and v.id == a.reuses]
            assert slots and all(info.overwritable(j) for j in slots), (node.op, slots)
            assert plan.allocations[a.reuses].nbytes == a.nbytes
    assert plan.arena_bytes <= plan.intermediate_bytes


@settings(max_examples=80, deadline=None)
@given(programs(max_steps=14))
def test_random_dags_never_overlap_live_values(program: Program) -> None:
    for g in (program.build(), run_passes(program.build())):
        for inplace in (True, False):
            plan = plan_memory(g, bindings(program), alignment=64, inplace=inplace)
            check_plan(plan, g)


@settings(max_examples=60, deadline=None)
@given(programs(max_steps=14))
def test_random_dags_split_across_arenas_under_a_binding_limit(program: Program) -> None:
    """A limit as small as the largest value: arenas split, no value crosses one's end."""
    g = program.build()
    whole = plan_memory(g, bindings(program), alignment=64)
    largest = max((-(-a.nbytes // 64) * 64 for a in whole.allocations.values()), default=64)
    for limit in (largest, largest + 100, 2 * largest):
        plan = plan_memory(g, bindings(program), alignment=64, binding_limit=limit)
        check_plan(plan, g, limit)


def test_a_binding_limit_splits_the_arena() -> None:
    """Five 1 KiB values alive at once under a 2.5 KiB limit: three arenas of at most
    2 KiB, each value whole in one; no limit: one arena of 5 KiB."""
    b = GraphBuilder()
    x = b.input("x", (16, 16))
    parts = [b.relu(b.scale(x, float(i + 1))) for i in range(5)]
    total = parts[0]
    for p in parts[1:]:
        total = b.add(total, p)
    b.output(total)
    g = b.build()
    assert plan_memory(g, inplace=False).arena_sizes == (plan_memory(g, inplace=False)
                                                         .arena_bytes,)
    plan = plan_memory(g, inplace=False, binding_limit=2 * KIB + 512)
    check_plan(plan, g, 2 * KIB + 512)
    assert len(plan.arena_sizes) >= 3
    assert {a.arena for a in plan.allocations.values()} == set(range(len(plan.arena_sizes)))


def test_a_value_larger_than_the_binding_limit_is_refused() -> None:
    with pytest.raises(GraphError, match=r"relu: an intermediate of 1024 bytes .*"
                                         r"maxStorageBufferRange = 1000 bytes"):
        plan_memory(chain(2), inplace=False, binding_limit=1000)
    with pytest.raises(GraphError, match="less than the alignment"):
        plan_memory(chain(2), binding_limit=100)


def test_planning_ignores_weights_and_dead_values() -> None:
    b = GraphBuilder()
    x = b.input("x", (8,))
    w = b.weight("w", np.ones(8, np.float32))
    dead = b.relu(x)  # nothing reads it: lives for its own step only
    b.output(b.add(x, w))
    g = b.build()
    plan = plan_memory(g)
    assert set(plan.allocations) == {dead.id}
    assert plan.allocations[dead.id].first == plan.allocations[dead.id].last == 0


def test_place_is_best_fit_not_first_fit() -> None:
    from vkumd.framework.graph.memory import place

    buffers = [(1024, 0, 9, 0), (768, 0, 1, 1), (512, 0, 9, 2), (384, 0, 1, 3),
               (256, 0, 9, 4), (256, 5, 6, 5)]
    offsets = place(buffers, 128)
    assert [offsets[k] for k in range(5)] == [0, 1024, 1792, 2304, 2688]
    # Gaps while key 5 lives: [1024, 1792) and [2304, 2688); the tighter one wins.
    assert offsets[5] == 2304
    assert place([(0, 0, 0, 7)], 64) == {7: 0}


def _residual_block(residual_is_a: bool = False) -> Graph:
    """x -> h = relu(x) -> f = relu(h @ w1) -> t = f @ w2 + h (residual) -> relu(t)."""
    b = GraphBuilder()
    x = b.input("x", (32, 16))
    w1 = b.weight("w1", np.ones((16, 64), np.float32))
    w2 = b.weight("w2", np.ones((64, 16), np.float32))
    h = b.relu(x)
    f = b.relu(b.matmul(h, w1))
    if residual_is_a:
        w3 = b.weight("w3", np.ones((16, 16), np.float32))
        t = b.matmul(h, w3, residual=h)
    else:
        t = b.matmul(f, w2, residual=h)
    b.output(b.relu(t))
    return b.build()


def test_matmul_writes_over_its_dying_residual_only() -> None:
    g = _residual_block()
    plan = plan_memory(g)
    check_plan(plan, g)
    matmul_out = next(a for a in plan.allocations.values()
                      if plan.schedule[a.first] == g.nodes[-2].id)
    assert matmul_out.reuses == g.nodes[-2].inputs[3].id  # the residual h, not a = f
    assert matmul_out.offset == plan.allocations[matmul_out.reuses].offset
    # Without the reuse h, f and t are all alive at the second matmul.
    assert plan.arena_bytes < plan_memory(g, inplace=False).arena_bytes


def test_matmul_never_overwrites_a_residual_it_also_multiplies() -> None:
    g = _residual_block(residual_is_a=True)
    plan = plan_memory(g)
    check_plan(plan, g)
    node = g.nodes[-2]
    out = next(a for a in plan.allocations.values() if plan.schedule[a.first] == node.id)
    assert out.reuses is None
