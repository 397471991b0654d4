"""A short AutoTVM run of an operator's template, for the report's comparison.

:func:`tune` creates the task of the example's template at the report's size, measures
``trials`` random configs (``autotvm.RandomTuner``; every candidate checked against the
operator's numpy function) and returns the best config and its time. A CUDA template is
not tuned without a GPU: its result says "not run".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .operators import Operator


@dataclass
class Tuned:
    """The best of a short tuning run: ``status`` ``ok``, ``not run (...)`` or ``error: ...``."""

    status: str
    trials: int = 0
    space: int = 0
    seconds: float | None = None
    config: str = ""


def tune(op: Operator, template, size: tuple[int, ...], trials: int, log: Path) -> Tuned:
    """Tune ``template`` (an ``@autotvm.template`` function) on ``size`` for ``trials``
    configs, appending the records to ``log``."""
    import kiln
    from kiln import autotvm

    if trials <= 0:
        return Tuned("not run (no trials asked)")
    if op.gpu and not kiln.cuda(0).exist:
        return Tuned("not run (no GPU)")
    try:
        task = autotvm.task.create(template.task_name, size, op.target)
        runner = autotvm.LocalRunner(number=3, repeat=3,
                                     ref_func=lambda *xs: [op.numpy(*xs)])
        option = autotvm.measure_option(builder=autotvm.LocalBuilder(), runner=runner)
        tuner = autotvm.RandomTuner(task)
        tuner.tune(n_trial=min(trials, len(task.config_space)), measure_option=option,
                   callbacks=[autotvm.callback.log_to_file(str(log))])
    except Exception as e:  # noqa: BLE001 - a failed run is reported, not raised
        return Tuned("error: " + " ".join(str(e).split())[:200])
    space = len(task.config_space)
    if tuner.best_measure_pair is None:
        return Tuned("no valid config", tuner.trials_done, space)
    _, result = tuner.best_measure_pair
    return Tuned("ok", tuner.trials_done, space, float(np.median(result.costs)),
                 str(tuner.best_config))
