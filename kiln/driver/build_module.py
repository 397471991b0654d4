"""TVM's ``tvm.driver.build_module``: ``lower``, ``build`` and ``schedule_to_module``."""

from __future__ import annotations

from kiln.ir.stmt import IRModule

from . import pipeline
from .build import build
from .lower import lower, schedule_to_primfunc


def schedule_to_module(sch, args=None, name: str = "main", binds=None) -> IRModule:
    """The schedule's loop nests as an IRModule, after the schedule phase only (phase 0 of
    ``pipeline.LOWER_PHASES``: tensors are still realized, not flattened)."""
    if args is None:
        raise TypeError("schedule_to_module needs the argument list: "
                        "schedule_to_module(s, [A, B, C])")
    func = schedule_to_primfunc(sch, list(args), name, binds, phases=pipeline.LOWER_PHASES[:1])
    return IRModule({name: func})


__all__ = ["lower", "build", "schedule_to_module"]
