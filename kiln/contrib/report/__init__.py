"""Reports of schedule sequences (``kiln report``): the course assignment's operators,
each step checked, timed, diffed and drawn; see docs/report.md.

``assignment_report(out, quick=...)`` writes ``report.md`` and ``report.html``; the pieces
are :mod:`.operators` (what is measured), :mod:`.measure` (one step), :mod:`.figures`
(space-time diagrams and memory tables), :mod:`.tuning` (AutoTVM) and :mod:`.render`.
"""

from .assignment import OperatorReport, StepReport, assignment_report, lowered_diff
from .operators import OPERATORS, Operator

__all__ = ["OPERATORS", "Operator", "OperatorReport", "StepReport", "assignment_report",
           "lowered_diff"]
