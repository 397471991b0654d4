"""The op strategy (kiln/relay/strategy.py): the order in which a fused group's schedule is
chosen, the narrow fallback (a schedule that does not apply is logged and replaced, a bug in
a schedule surfaces), and results unchanged by the fallback."""

from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("onnx")

from kiln import relay, topi  # noqa: E402
from kiln.errors import ScheduleError, TVMError  # noqa: E402
from kiln.relay import strategy  # noqa: E402
from kiln.relay.build_module import optimize_and_fuse  # noqa: E402
from kiln.target import Target  # noqa: E402

from . import models  # noqa: E402


def _groups(model, target="llvm"):
    mod, params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3):
        return optimize_and_fuse(mod, params, Target(target))[1]


def _conv_group():
    (group,) = [g for g in _groups(models.conv_bias_relu()) if g.nodes[0].op == "conv2d_NCHWc"]
    return group


def _feed(model):
    vi = model.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    return {vi.name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)}


def _raise(error):
    def schedule(*args):
        raise error

    return schedule


def test_hand_schedule_without_a_tuned_record():
    group = _conv_group()
    impl = strategy.select_implementation(group, "k", Target("llvm"))
    assert impl.schedule_name == "x86" and impl.tuned is None
    assert impl.func.name == "k" and impl.group is group
    assert [t.name for t in impl.args[:-1]] == [f"p{k}" for k in range(len(impl.inputs))]


def test_gpu_target_schedules_from_topi_cuda():
    # a CPU group (NCHWc) on cuda: topi.cuda has no schedule named for conv2d_NCHWc, so the
    # group gets one thread per output (tests/relay/test_cuda_build.py: the GPU ladder)
    with Target("cuda"):
        impl = strategy.select_implementation(_conv_group(), "k", Target("cuda"))
    assert impl.schedule_name == "topi.cuda"


@pytest.mark.parametrize("error", [ScheduleError("split factor does not divide"),
                                   TVMError("cannot infer the bound"),
                                   NotImplementedError("no schedule for this pattern")])
def test_schedule_that_does_not_apply_is_logged_and_replaced(monkeypatch, caplog, error):
    model = models.conv_bias_relu()
    feed = _feed(model)
    _, expected = models.build_and_run(model, feed)
    monkeypatch.setattr(topi.x86, "schedule_auto", _raise(error))
    with caplog.at_level(logging.WARNING, logger="kiln.relay.strategy"):
        lib, y = models.build_and_run(model, feed)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    messages = [r.getMessage() for r in caplog.records if r.name == "kiln.relay.strategy"]
    assert len(messages) == len(lib.summary.splitlines()) - 2  # one per kernel
    assert any("x86 schedule failed for conv2d_NCHWc + add + relu" in m for m in messages)
    assert all(f"{type(error).__name__}: {error}" in m and "using the generic schedule" in m
               for m in messages)


def test_tuned_record_that_does_not_apply_falls_back_to_the_hand_schedule(monkeypatch,
                                                                          caplog):
    monkeypatch.setattr(strategy, "schedule_group",
                        _raise(ScheduleError("config does not fit")))
    with caplog.at_level(logging.WARNING, logger="kiln.relay.strategy"):
        impl = strategy.select_implementation(_conv_group(), "k", Target("llvm"))
    assert impl.schedule_name == "x86"
    assert "autotvm schedule failed" in caplog.text and "using the x86 schedule" in caplog.text


@pytest.mark.parametrize("error", [ZeroDivisionError("division by zero"),
                                   AttributeError("'Stage' object has no attribute 'x'")])
def test_schedule_bug_surfaces_from_relay_build(monkeypatch, error):
    mod, params = relay.frontend.from_onnx(models.conv_bias_relu())
    monkeypatch.setattr(topi.x86, "schedule_auto", _raise(error))
    with pytest.raises(type(error), match=str(error)):
        relay.build(mod, "llvm", params=params)


def test_generic_schedule_errors_propagate(monkeypatch):
    monkeypatch.setattr(topi.x86, "schedule_auto", _raise(ScheduleError("x86")))
    monkeypatch.setattr(topi.generic, "schedule_auto", _raise(ScheduleError("generic")))
    with pytest.raises(ScheduleError, match="generic"):
        strategy.select_implementation(_conv_group(), "k", Target("llvm"))
