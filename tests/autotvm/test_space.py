"""Config spaces, entities, templates and fallback configs (no measurement)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm, te
from kiln.autotvm.task.space import (
    AnnotateSpace,
    ConfigEntity,
    ConfigSpace,
    FallbackConfigEntity,
    OtherOptionSpace,
    ReorderSpace,
    SplitEntity,
    SplitSpace,
)

from ._templates import gemm


def _axes(n, extent=8):
    return list(te.compute((extent,) * n, lambda *i: i[0] * 1.0).op.axis)


def test_split_policies_count_candidates():
    assert len(SplitSpace(1024)) == 11  # 1024 has 11 divisors
    assert [e.size for e in SplitSpace(12)] == [[-1, d] for d in (1, 2, 3, 4, 6, 12)]
    assert len(SplitSpace(100, policy="power2")) == 7  # 1 .. 64, outer rounds up
    assert len(SplitSpace(12, policy="verbose")) == len({1, 2, 3, 4, 6, 12, 8})
    # ordered factorizations of 2**6 into 3 parts: sum over the middle factor
    assert len(SplitSpace(64, num_outputs=3)) == 28
    assert all(max(e.size[1:]) <= 8 for e in SplitSpace(64, num_outputs=3, max_factor=8))
    assert len(SplitSpace(64, filter=lambda e: e.size[-1] >= 8)) == 4
    cand = SplitSpace(100, policy="candidate", candidate=[[-1, 6], [-1, 8]])
    assert [e.size for e in cand] == [[-1, 6], [-1, 8]]
    with pytest.raises(ValueError, match="candidate"):
        SplitSpace(100, policy="candidate", candidate=[[-1, 0]])


def test_split_space_bad_input():
    with pytest.raises(ValueError, match="unknown policy 'fast'"):
        SplitSpace(16, policy="fast")
    x = te.var("n")
    A = te.placeholder((x,), name="A")
    C = te.compute((x,), lambda i: A[i], name="C")
    with pytest.raises(ValueError, match="no constant length"):
        SplitSpace(C.op.axis[0])


def test_split_entity_apply_gives_loops_of_those_factors():
    A = te.placeholder((64,), name="A")
    C = te.compute((64,), lambda i: A[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    loops = SplitEntity([-1, 4, 8]).apply(s, C, C.op.axis[0])
    assert len(loops) == 3
    text = str(tvm.lower(s, [A, C], simple_mode=True))
    assert "0, 2)" in text and "0, 4)" in text and "0, 8)" in text
    a = tvm.nd.array(np.arange(64, dtype="float32"))
    c = tvm.nd.empty((64,))
    tvm.build(s, [A, C])(a, c)
    np.testing.assert_allclose(c.numpy(), np.arange(64) * 2.0)


def test_reorder_annotate_knob_spaces():
    ax = _axes(3)
    assert len(ReorderSpace(ax, "all")) == 6
    assert [e.perm for e in ReorderSpace(ax, "identity")] == [[0, 1, 2]]
    assert len(ReorderSpace(ax, "interval_all", interval=(1, 3))) == 2
    cand = ReorderSpace(ax, "candidate", candidate=[[ax[2], ax[0], ax[1]], ax])
    assert [e.perm for e in cand] == [[2, 0, 1], [0, 1, 2]]
    with pytest.raises(NotImplementedError):
        ReorderSpace(ax, "interleave")
    assert len(AnnotateSpace(ax[:2], "try_unroll")) == 4
    assert len(AnnotateSpace(ax[:2], "try_unroll_vec")) == 6
    assert [e.anns for e in AnnotateSpace(ax[:2], "try_vec")] == [["none", "none"],
                                                                  ["none", "vec"]]
    assert [e.val for e in OtherOptionSpace([0, 16, 512])] == [0, 16, 512]


def test_config_space_size_index_and_print():
    task = autotvm.task.create("test_gemm", (64, 32, 16), "llvm")
    space = task.config_space
    # tile_y: 7 divisors of 64, tile_x: 5 of 16, ann: 2 * 3
    assert space.dims == [7, 5, 6]
    assert len(space) == 7 * 5 * 6
    for idx in (0, 1, 17, len(space) - 1):
        cfg = space.get(idx)
        assert cfg.index == idx
        assert space.index_of(space.knob_indices(idx)) == idx
    cfg = space.get(7 * 2 + 1)  # tile_y choice 1, tile_x choice 2
    assert cfg["tile_y"].size == [-1, 2] and cfg["tile_x"].size == [-1, 4]
    text = repr(space)
    assert "len=210" in text and "tile_y: Split(policy=factors, product=64" in text
    assert "ann: Annotate(policy=try_unroll_vec" in text
    assert "tile_x=sp[-1, 4]" in repr(cfg)
    with pytest.raises(IndexError):
        space.get(len(space))
    assert task.flop == 2 * 64 * 32 * 16


def test_every_config_computes_the_same_result():
    task = autotvm.task.create("test_gemm", (16, 8, 8), "llvm")
    rng = np.random.default_rng(0)
    a = rng.random((16, 8), dtype=np.float32)
    b = rng.random((8, 8), dtype=np.float32)
    for idx in range(0, len(task.config_space), 11):
        s, args = task.instantiate(task.config_space.get(idx))
        c = tvm.nd.empty((16, 8))
        tvm.build(s, args)(tvm.nd.array(a), tvm.nd.array(b), c)
        np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5)


def test_add_flop_overrides_the_counted_flop():
    @autotvm.template("test_add_flop")
    def f(n):
        A = te.placeholder((n,), name="A")
        C = te.compute((n,), lambda i: A[i] + 1.0, name="C")
        cfg = autotvm.get_config()
        cfg.define_knob("k", [1, 2])
        cfg.add_flop(12345)
        return te.create_schedule(C.op), [A, C]

    assert autotvm.task.create("test_add_flop", (8,), "llvm").flop == 12345


def test_fallback_config_when_nothing_is_tuned(caplog):
    with caplog.at_level(logging.WARNING, logger="autotvm"):
        s, args = gemm(32, 8, 16)
        gemm(32, 8, 16)
    msgs = [r.getMessage() for r in caplog.records if "Cannot find config" in r.getMessage()]
    assert len(msgs) == 1  # once per workload
    assert "workload=('test_gemm', 32, 8, 16)" in msgs[0]
    assert "fallback configuration is used" in msgs[0]
    text = str(tvm.lower(s, args, simple_mode=True))
    assert "vectorized" not in text and "unrolled" not in text


def test_fallback_entity_defaults_and_presets():
    cfg = FallbackConfigEntity()
    ax = _axes(2)
    cfg["tile"] = SplitEntity([-1, 4])
    cfg.define_split("tile", ax[0])  # a preset knob keeps its value
    cfg.define_split("other", ax[1], num_outputs=3)
    cfg.define_reorder("order", ax, "all")
    cfg.define_annotate("ann", ax, "try_unroll")
    cfg.define_knob("unroll", [16, 0])
    assert cfg.is_fallback
    assert cfg["tile"].size == [-1, 4]
    assert cfg["other"].size == [-1, 1, 1]
    assert cfg["order"].perm == [0, 1]
    assert cfg["ann"].anns == ["none", "none"]
    assert cfg["unroll"].val == 16
    cfg.fallback_split("fs", [-1, 6, 4], 96)
    assert cfg["fs"].size == [-1, 6, 4]


def test_config_entity_json_round_trip():
    task = autotvm.task.create("test_gemm", (64, 32, 16), "llvm")
    cfg = task.config_space.get(123)
    back = ConfigEntity.from_json_dict(cfg.to_json_dict())
    assert back == cfg and back.index == 123
    s, args = task.instantiate(back)
    assert str(tvm.lower(s, args)) == str(tvm.lower(*task.instantiate(cfg)))


def test_template_errors_are_precise():
    with pytest.raises(RuntimeError, match="inside a function decorated"):
        autotvm.get_config()
    with pytest.raises(ValueError, match="no template named 'nope'"):
        autotvm.task.create("nope", (1,), "llvm")
    space = ConfigSpace()
    space.define_knob("a", [1])
    with pytest.raises(ValueError, match="defined twice"):
        space.define_knob("a", [2])
    with pytest.raises(KeyError, match="no knob 'b'"):
        space["b"]
    with pytest.raises(TypeError, match="pass arguments by position"):
        gemm(N=4, L=4, M=4)


def test_template_without_name_and_knob_feature():
    @autotvm.template
    def test_unnamed(n):
        A = te.placeholder((n,), name="A")
        C = te.compute((n,), lambda i: A[i] * 2.0, name="C")
        s = te.create_schedule(C.op)
        cfg = autotvm.get_config()
        cfg.define_split("t", C.op.axis[0])
        cfg.define_knob("u", [0, 512])
        cfg["t"].apply(s, C, C.op.axis[0])
        return s, [A, C]

    task = autotvm.task.create(test_unnamed, (16,), "llvm")
    assert task.name == "test_unnamed" and len(task.config_space) == 10
    assert task.config_space.knob_feature(9) == [4.0, 1.0, 512.0]
