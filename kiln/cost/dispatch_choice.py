"""The vector paths of a ``split(..., tail="dispatch")`` remainder, chosen by the cost model.

A dispatch split of factor ``f`` runs its full tiles ``f`` wide and cuts the remainder
(``r < f`` iterations) into paths of descending widths (``kiln.tir.dispatch_remainder``).
The candidate widths are the divisors of ``f`` between 1 and ``f``, widest first; each is
kept, in turn, when it divides the last width kept and the cost model predicts that the
function issues fewer cycles of instructions with it than without it. The paths move the
same bytes as the scalar loop, so the choice compares compute cycles alone
(:func:`kiln.cost.estimate.compute_cycles`): the total would hide them under the memory
time of a memory-bound kernel, which repeated calls on data in cache do not pay. The
prediction is the mean over the remainders: symbolic extents (those not in ``binding``) at
``default_extent + r`` for ``r`` in ``0 .. f-1`` (at most ``MAX_REMAINDERS`` of them,
evenly spread), since which remainder occurs is known only at run time; a constant extent
has one remainder, its own. The widths kept go to ``Split.dispatch_widths`` (empty: the
scalar remainder loop alone).

``PassContext(config={"tir.DispatchRemainder": {"widths": (8, 4)}})`` fixes the widths
instead (a tuner measuring them, a test): each split keeps those that form a chain of
divisors of its factor.

Guarantee: whatever the widths, the paths run the remainder's iterations once each, in
order, so the program computes what it computes with ``tail="predicate"``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kiln.errors import TVMError
from kiln.ir.stmt import Stmt
from kiln.ir.transform import PassContext
from kiln.te.schedule import Split
from kiln.te.split_tail import dispatch_factor

from .estimate import compute_cycles

#: at most this many remainders are priced per candidate
MAX_REMAINDERS = 8
#: the PassContext config key whose "widths" fix the paths of every dispatch split
CONFIG_KEY = "tir.DispatchRemainder"


def candidate_widths(factor: int) -> list[int]:
    """The divisors of ``factor`` strictly between 1 and ``factor``, widest first."""
    return [w for w in range(factor - 1, 1, -1) if factor % w == 0]


def divisor_chain(widths: Sequence[int], factor: int) -> tuple[int, ...]:
    """The widths of ``widths``, widest first, that each divide ``factor`` and the one kept
    before them."""
    out: list[int] = []
    for w in sorted(set(widths), reverse=True):
        if 1 < w < factor and (out[-1] if out else factor) % w == 0:
            out.append(w)
    return tuple(out)


def configured_widths(ctx: PassContext) -> tuple[int, ...] | None:
    """The widths ``ctx.config["tir.DispatchRemainder"]`` fixes (None: the cost model's)."""
    options = ctx.config.get(CONFIG_KEY, {})
    if not isinstance(options, Mapping) or set(options) - {"widths"}:
        raise TVMError(f"PassContext config '{CONFIG_KEY}' takes a dict such as "
                       f"{{\"widths\": (8, 4)}}, got {options!r}")
    widths = options.get("widths")
    if widths is None:
        return None
    if not all(isinstance(w, int) and w > 0 for w in widths):
        raise TVMError(f"PassContext config '{CONFIG_KEY}': widths are positive integers, "
                       f"got {widths!r}")
    return tuple(widths)


def remainders(factor: int) -> list[int]:
    """The remainders the prediction averages over (module docstring)."""
    step = max(1, factor // MAX_REMAINDERS)
    return list(range(0, factor, step))[:MAX_REMAINDERS]


def choose_widths(rel: Split, lower_with: Callable[[], Stmt], binding: dict | None = None,
                  default_extent: int = 1024) -> dict[tuple[int, ...], float]:
    """Set ``rel.dispatch_widths`` (module docstring), lowering the function with
    ``lower_with()``; returns the predicted mean compute cycles of each set of widths
    tried."""
    factor = dispatch_factor(rel)
    rel.dispatch_widths = ()
    if factor is None or not candidate_widths(factor):
        return {}
    fixed = configured_widths(PassContext.current())
    if fixed is not None:
        rel.dispatch_widths = divisor_chain(fixed, factor)
        return {}
    spread = remainders(factor)

    def mean_cycles(widths: tuple[int, ...]) -> float:
        rel.dispatch_widths = widths
        func = lower_with()
        return sum(compute_cycles(func, binding=binding, default_extent=default_extent + r)
                   for r in spread) / len(spread)

    kept: tuple[int, ...] = ()
    tried = {kept: mean_cycles(kept)}
    for w in candidate_widths(factor):
        if kept and kept[-1] % w:
            continue
        trial = (*kept, w)
        tried[trial] = mean_cycles(trial)
        if tried[trial] < tried[kept]:
            kept = trial
    rel.dispatch_widths = kept
    return tried


__all__ = ["MAX_REMAINDERS", "CONFIG_KEY", "candidate_widths",
           "divisor_chain", "configured_widths", "remainders", "choose_widths"]
