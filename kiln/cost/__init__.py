"""``kiln.cost``: a cost model of lowered loop programs on a CPU (issue 19, seed 004).

``estimate(func, hw=None, binding=None)`` predicts the cycles, the bytes moved per memory level,
the cache misses and the time of a function lowered by ``kiln.lower``, from a loop-nest
analysis (``loop_nest``) priced on a machine model read from the target (``machine``); its
``explain()`` prints the loop execution procedure with the cost of each loop (``estimate``).
``tail_choice`` uses it to choose the tail strategy of ``split(..., tail="auto")``, and
``dispatch_choice`` the widths of the vector paths of a ``tail="dispatch"`` remainder.
docs/dynamic.md describes the model and its validation (benchmarks/cost_model.py).
"""

from .estimate import CostEstimate, estimate
from .machine import MachineModel, machine_model

__all__ = ["estimate", "CostEstimate", "MachineModel", "machine_model"]
