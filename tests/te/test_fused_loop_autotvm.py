"""The AutoTVM knob of ``create_fused_loop`` (``kiln.autotvm.fused_loop.fuse_branches``):
one knob, "do not fuse" or one order of the branches with its layout (end to end, or
interleaved in blocks of k rows), every config correct, each one reachable by tuning."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import autotvm, te
from kiln.autotvm.measure.measure import MeasureInput, MeasureResult
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import IfThenElse

M, N = 3, 16


@autotvm.template("test_fused_loop_unequal_branches")
def unequal_branches(m, n):
    A = te.placeholder((m, n), name="A")
    B = te.placeholder((2 * m, n), name="B")
    X = te.compute(A.shape, lambda x, y: A[x, y] + 1, name="X")
    Y = te.compute(B.shape, lambda x, y: te.exp(B[x, y]), name="Y")
    Z = te.compute((m, n), lambda x, y: X[x, y] * Y[2 * x + 1, y], name="Z")
    s = te.create_schedule(Z.op)
    cfg = autotvm.get_config()
    fused = autotvm.fused_loop.fuse_branches(cfg, s, [X, Y])
    if fused is not None:
        s[fused[0]].parallel(fused[0].op.loop_axis)
    return s, [A, B, Z]


def _branch_conditions(body) -> list[str]:
    found: list[str] = []
    post_order_visit(body, lambda n: found.append(str(n.condition))
                     if isinstance(n, IfThenElse) else None)
    return found


def _task():
    return autotvm.task.create("test_fused_loop_unequal_branches", (M, N), "llvm")


def test_knob_is_fuse_or_not_the_branch_order_and_the_layout():
    space = _task().config_space
    # X has 3 rows, Y 6: blocks of k rows differ from end to end while the first branch
    # has more than k rows
    assert [e.val for e in space.space_map["fuse_branches"].entities] == [
        [], [[0, 1], None], [[0, 1], 1], [[0, 1], 2],
        [[1, 0], None], [[1, 0], 1], [[1, 0], 2], [[1, 0], 4]]
    conditions = []
    for index in range(len(space)):
        with autotvm.ApplyConfig(space.get(index)):
            s, args = unequal_branches(M, N)
        conditions.append(_branch_conditions(kiln.lower(s, args)["main"].body))
    # the conditions of the branch chain (innermost first): unfused; X's 3 rows then Y's;
    # rounds of one row of each while X has rows (6 rows), then Y's; rounds of 2 rows ...
    assert conditions == [
        [], ["(fused < 3)"], ["(fused.pos < 1)", "(fused < 6)"],
        ["(fused < 2)", "(fused < 5)", "(fused < 7)", "(fused < 4)"],
        ["(fused < 6)"], ["(fused.pos < 1)", "(fused < 6)"],
        ["(fused < 2)", "(fused < 6)", "(fused < 7)", "(fused < 4)"],
        ["(fused < 4)", "(fused < 7)"]]


@pytest.mark.slow
def test_every_config_matches_numpy():
    space = _task().config_space
    a, b = np.random.rand(M, N).astype("float32"), np.random.rand(2 * M, N).astype("float32")
    for index in range(len(space)):
        with autotvm.ApplyConfig(space.get(index)):
            s, args = unequal_branches(M, N)
        f = kiln.build(s, args, target="llvm")
        z = kiln.nd.array(np.zeros((M, N), "float32"))
        f(kiln.nd.array(a), kiln.nd.array(b), z)
        np.testing.assert_allclose(z.numpy(), (a + 1) * np.exp(b[1::2]), rtol=1e-5)


def test_symbolic_extents_are_only_placed_end_to_end():
    n = te.var("n")
    assert autotvm.fused_loop.candidates([n, 2 * n]) == [[], [[0, 1], None], [[1, 0], None]]


@pytest.mark.parametrize("index", range(8))
def test_a_tuned_record_chooses_each_candidate(index, tmp_path):
    """apply_history_best of a record holding candidate ``index`` (the best one a tuner
    logged) schedules the template with it."""
    task = _task()
    config = task.config_space.get(index)
    log = tmp_path / "fused.log"
    result = MeasureResult((1e-5,), 0, 0.1, 0.0)
    autotvm.record.save_to_file([(MeasureInput(task.target, task, config), result)], str(log))
    with autotvm.apply_history_best(str(log)):
        s, _ = unequal_branches(M, N)
    fused = [st.op for st in s.stages if st.name == "fused"]
    choice = config["fuse_branches"].val
    assert bool(fused) == bool(choice)
    if fused:
        assert [t.op.name for t in fused[0].branches] == [["X", "Y"][i] for i in choice[0]]
        assert fused[0].interleave == choice[1]


@pytest.mark.slow
def test_tuning_measures_every_layout(tmp_path):
    """A grid search over the whole space (8 trials) measures every candidate without
    error and logs records that apply_history_best reads back."""
    task = _task()
    log = tmp_path / "fused.log"
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2, timeout=30),
                                    runner=autotvm.LocalRunner(number=2, repeat=2, timeout=30))
    autotvm.tuner.GridSearchTuner(task).tune(len(task.config_space), option,
                                              callbacks=[autotvm.callback.log_to_file(str(log))])
    records = list(autotvm.record.load_from_file(str(log)))
    assert sorted(inp.config.index for inp, _ in records) == list(range(8))
    assert all(res.error_no == 0 for _, res in records)
    with autotvm.apply_history_best(str(log)):
        s, args = unequal_branches(M, N)
    kiln.lower(s, args)


def test_untuned_template_does_not_fuse():
    with autotvm.FallbackContext():
        s, _ = unequal_branches(M, N)
    assert "fused" not in [st.name for st in s.stages]


def test_too_many_branches_is_a_clear_error():
    cfg = autotvm.task.space.ConfigSpace()
    with pytest.raises(ValueError, match="give 2 to 5 branches"):
        autotvm.fused_loop.fuse_branches(cfg, None, [None])
