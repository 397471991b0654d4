"""The tail strategy of ``split(..., tail="auto")``, chosen by the cost model.

First every ``tail="dispatch"`` split gets the widths of its remainder's paths
(:mod:`kiln.cost.dispatch_choice`). Then for each split asking for "auto", outermost stage
and split first, every strategy legal for it (``kiln.te.split_tail.legal_tails``, "pad"
where the stage is not a function argument) is tried in turn: the whole function is lowered
with that choice (the loop nests, then ``finish`` — the rest of ``kiln.lower``'s phases,
which the driver passes in) and priced by :func:`kiln.cost.estimate` on the current target,
symbolic extents at their ``binding`` or ``default_extent`` ("dispatch" with the widths
chosen for it). The cheapest is kept in ``Split.auto_choice`` (ties go to the earlier
candidate in :data:`PREFERENCE`), and lowering then uses it like an explicit ``tail=``.
Splits decided earlier keep their choice while later ones are tried.

Guarantee: the choice is one of the strategies the split accepts, so the program computes the
same values as with any of them; only its speed depends on the model.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.ir.stmt import Stmt
from kiln.te.schedule import Schedule, Split
from kiln.te.split_tail import legal_tails

from .dispatch_choice import choose_widths
from .estimate import estimate

#: the order candidates are tried in (ties keep the earlier one)
PREFERENCE = ("partition", "predicate", "shift_inwards", "pad", "guard", "dispatch")


def _splits(sch: Schedule) -> list[tuple]:
    """``(stage, split)`` for every split of ``sch``."""
    return [(st, rel) for st in sch.stages for rel in st.relations if isinstance(rel, Split)]


def auto_splits(sch: Schedule) -> list[tuple]:
    """``(stage, split)`` for every split of ``sch`` with ``tail="auto"``."""
    return [(st, rel) for st, rel in _splits(sch) if rel.tail == "auto"]


def has_choices(sch: Schedule) -> bool:
    """Whether a split of ``sch`` leaves a choice to the cost model ("auto", "dispatch")."""
    return any(rel.tail in ("auto", "dispatch") for _, rel in _splits(sch))


def choose_tails(sch: Schedule, lower_with: Callable[[], Stmt], arg_ops: set,
                 binding: dict | None = None, default_extent: int = 1024) -> dict:
    """Set ``auto_choice`` of every "auto" split of ``sch`` (module docstring), lowering the
    function with ``lower_with()``; ``arg_ops`` are the operations whose tensors are
    arguments. Returns ``{split: (choice, {candidate: predicted cycles})}`` for the "auto"
    splits."""
    for _, rel in _splits(sch):
        if rel.tail == "dispatch":
            choose_widths(rel, lower_with, binding, default_extent)
    report = {}
    for stage, rel in auto_splits(sch):
        legal = set(legal_tails(stage, rel.parent))
        if stage.op in arg_ops:
            legal.discard("pad")
        costs = {}
        for candidate in (t for t in PREFERENCE if t in legal):
            rel.auto_choice = candidate
            if candidate == "dispatch":
                choose_widths(rel, lower_with, binding, default_extent)
            costs[candidate] = estimate(lower_with(), binding=binding,
                                        default_extent=default_extent).cycles
        rel.auto_choice = min(costs, key=costs.get)
        report[rel] = (rel.auto_choice, costs)
    return report


__all__ = ["PREFERENCE", "auto_splits", "has_choices", "choose_tails"]
