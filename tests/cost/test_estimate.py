"""``kiln.cost.estimate``: the issue-19 sanity checks (P5) on lowered functions, its
inputs and its per-loop explanation."""

from __future__ import annotations

import pytest

import kiln
from kiln import cost, te
from kiln.cost.machine import MachineModel
from kiln.target.memory import CacheLevel, host_memory, parse_size

#: a fixed machine, so that the checks do not depend on the host
MACHINE = MachineModel(vector_bytes=32, fma_units=2,
                       caches=(CacheLevel("L1", 32 << 10, 64), CacheLevel("L2", 1 << 20, 64),
                               CacheLevel("L3", 8 << 20, 64)),
                       cores=4, clock_hz=3e9,
                       bytes_per_cycle={"L2": 32.0, "L3": 16.0, "DRAM": 5.0})


def vector_add(n, factor=8, tail=None, vectorize=True):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    _, inner = s[C].split(C.op.axis[0], factor=factor, tail=tail)
    if vectorize:
        s[C].vectorize(inner)
    return kiln.lower(s, [A, B, C])


def matmul(n, tile=0):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    if tile:
        io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], tile, tile)
        s[C].reorder(io, jo, k, ii, ji)
        s[C].vectorize(ji)
    return kiln.lower(s, [A, B, C])


def test_doubling_an_elementwise_extent_doubles_the_cycles():
    small = cost.estimate(vector_add(1 << 20), MACHINE).cycles
    large = cost.estimate(vector_add(1 << 21), MACHINE).cycles
    assert 1.8 < large / small < 2.2


def test_tiled_matmul_moves_fewer_bytes_than_untiled():
    naive = cost.estimate(matmul(512), MACHINE)
    tiled = cost.estimate(matmul(512, tile=32), MACHINE)
    for level in ("L2", "L3"):
        assert tiled.bytes[level] < naive.bytes[level] / 4
    assert tiled.cycles < naive.cycles


def test_bytes_and_misses_of_a_streaming_kernel():
    n = 1 << 22  # 3 arrays of 16 MiB: nothing fits the caches
    e = cost.estimate(vector_add(n), MACHINE)
    assert e.bytes["L1"] == pytest.approx(3 * 4 * n)
    assert e.bytes["DRAM"] == pytest.approx(3 * 4 * n, rel=0.01)
    assert e.misses["L3"] == pytest.approx(3 * 4 * n / 64, rel=0.01)
    assert e.seconds == pytest.approx(e.cycles / MACHINE.clock_hz)


def test_symbolic_extents_take_the_binding():
    n = te.var("n")
    f = vector_add(n)
    by_var = cost.estimate(f, MACHINE, binding={n: 4096}).cycles
    by_name = cost.estimate(f, MACHINE, binding={"n": 4096}).cycles
    default = cost.estimate(f, MACHINE, default_extent=4096).cycles
    assert by_var == by_name == default
    assert cost.estimate(f, MACHINE, binding={n: 8192}).cycles > by_var


def test_a_guarded_vector_loop_costs_more_than_its_partition():
    n = te.var("n")
    guard = cost.estimate(vector_add(n, tail="guard"), MACHINE, binding={n: 10000})
    part = cost.estimate(vector_add(n, tail="partition"), MACHINE, binding={n: 10000})
    assert part.cycles < guard.cycles


def test_explain_exports_the_loop_execution_procedure():
    text = cost.estimate(matmul(64, tile=16), MACHINE).explain()
    for word in ("i.outer", "j.outer", "k", "i.inner", "footprint", "cycles", "L1",
                 "bytes moved", "vector 32 B"):
        assert word in text


def test_accepts_a_primfunc_a_stmt_and_a_module():
    mod = vector_add(1024)
    func = next(iter(mod.functions.values()))
    a, b, c = (cost.estimate(x, MACHINE).cycles for x in (mod, func, func.body))
    assert a == b == c
    with pytest.raises(TypeError, match="lower a schedule first"):
        cost.estimate(te.create_schedule([]), MACHINE)


def test_the_machine_model_is_read_from_the_target():
    m = cost.machine_model()
    assert m.vector_bytes == kiln.target.Target("llvm").cpu.vector_bytes
    assert m.caches == host_memory().caches and m.caches[0].size_bytes > 0
    assert m.levels[-1] == "DRAM" and set(m.bytes_per_cycle) == set(m.levels[1:])
    narrow = cost.machine_model("llvm -mcpu=haswell")
    assert narrow.vector_bytes == 32 and narrow.fma_units == 2
    with pytest.raises(ValueError, match="CPU targets"):
        cost.machine_model("cuda")


@pytest.mark.parametrize("text,size", [("48K", 48 << 10), ("2048K", 2 << 20), ("1M", 1 << 20),
                                       ("64", 64)])
def test_sysfs_cache_sizes(text, size):
    assert parse_size(text) == size
