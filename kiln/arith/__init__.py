"""kiln.arith: integer simplification, bounds and interval analysis (``tvm.arith``).

* ``simplify(expr_or_stmt)`` - canonical simplification (statements via ``simplify_stmt``)
* ``Analyzer`` - facts about variables (``bind``, ``constraint``) and the queries
  ``simplify``, ``can_prove``, ``const_int_bound``, ``modular_set``, ``eval_interval``
* ``IntervalSet`` / ``eval_interval`` - symbolic interval analysis for bound inference
* ``evaluate`` - a reference evaluator of expressions over Python numbers

See docs/arith.md for the guarantees, the canonical form and the sign assumption.
"""

from __future__ import annotations

from .analyzer import Analyzer
from .bound import ConstIntBound
from .evaluate import evaluate
from .interval import IntervalSet, from_range, intersect, neg_inf, pos_inf, union
from .modular import ModularSet
from .stmt_simplify import simplify_stmt


def simplify(node, analyzer: Analyzer | None = None):
    """Simplify an expression, a statement or a PrimFunc."""
    return (analyzer or Analyzer()).simplify(node)


def eval_interval(expr, dom_map=None, analyzer: Analyzer | None = None) -> IntervalSet:
    """The interval of ``expr`` when each variable of ``dom_map`` ranges over its set (a
    Range, an IntervalSet or an expression); other variables stay symbolic."""
    return (analyzer or Analyzer()).eval_interval(expr, dom_map)


def const_int_bound(expr, analyzer: Analyzer | None = None) -> ConstIntBound:
    return (analyzer or Analyzer()).const_int_bound(expr)


int_set = eval_interval

__all__ = [
    "Analyzer", "ConstIntBound", "IntervalSet", "ModularSet", "const_int_bound",
    "eval_interval", "evaluate", "from_range", "int_set", "intersect", "neg_inf", "pos_inf",
    "simplify", "simplify_stmt", "union",
]
