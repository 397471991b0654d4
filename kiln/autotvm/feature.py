"""Features of a config for the cost model.

``itervar`` features are read from the lowered loop program, as the TVM paper describes:
for every buffer access and every loop level around it (innermost = level 0), how many
accesses the sub-nest up to that level makes (count), how many distinct elements it touches
(touch: the product of the extents of the loops the index depends on) and their ratio
(reuse); the stride of the innermost loop the index moves with; and for the loops of the
costliest statement, their extent, how many iterations enclose them, and a one-hot of their
annotation (serial, parallel, vectorized, unrolled). A vector access (``ramp``) counts as an
innermost vectorized loop of its lanes. Counts are summed over accesses and stored as
``log2(1 + x)``.

``knob`` features are the choices themselves (see ``ConfigSpace.knob_feature``).

Features are dicts ``{name: value}``; the cost model lines them up by name, so configs whose
programs have different buffers or depths still compare.
"""

from __future__ import annotations

import math
from collections import defaultdict

from kiln.ir.expr import Add, IntImm, Load, Mul, Ramp, Sub, Var
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import Allocate, AttrStmt, For, IfThenElse, LetStmt, SeqStmt, Store

__all__ = ["get_itervar_feature", "get_knob_feature", "MAX_LEVELS"]

MAX_LEVELS = 8
_KINDS = ("serial", "parallel", "vectorized", "unrolled")


def _coef(expr, var) -> int | None:
    """The coefficient of ``var`` in a linear integer expression; None if not linear."""
    if expr is var:
        return 1
    if isinstance(expr, IntImm) or isinstance(expr, Var):
        return 0
    if isinstance(expr, Add | Sub):
        a, b = _coef(expr.a, var), _coef(expr.b, var)
        if a is None or b is None:
            return None
        return a + b if isinstance(expr, Add) else a - b
    if isinstance(expr, Mul):
        for x, y in ((expr.a, expr.b), (expr.b, expr.a)):
            if isinstance(y, IntImm):
                c = _coef(x, var)
                return None if c is None else c * int(y.value)
        return None
    found = []
    post_order_visit(expr, lambda n: found.append(n) if n is var else None)
    return None if found else 0


def _uses(expr, var) -> bool:
    hit = []
    post_order_visit(expr, lambda n: hit.append(1) if n is var else None)
    return bool(hit)


class _Loop:
    __slots__ = ("var", "extent", "kind")

    def __init__(self, var, extent: int, kind: str):
        self.var, self.extent, self.kind = var, extent, kind


def _const(x, default: int = 1) -> int:
    return int(x.value) if isinstance(x, IntImm) else default


class _Extractor:
    def __init__(self) -> None:
        self.feats: dict[str, float] = defaultdict(float)
        self.main: tuple[float, list[_Loop]] = (-1.0, [])

    def stmt(self, s, loops: list[_Loop]) -> None:
        if isinstance(s, For):
            kind = s.kind.value if s.kind.value in _KINDS else "serial"
            self.stmt(s.body, loops + [_Loop(s.loop_var, _const(s.extent), kind)])
        elif isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x, loops)
        elif isinstance(s, IfThenElse):
            self.stmt(s.then_case, loops)
            if s.else_case is not None:
                self.stmt(s.else_case, loops)
        elif isinstance(s, AttrStmt | LetStmt | Allocate):
            self.stmt(s.body, loops)
        elif isinstance(s, Store):
            self.store(s, loops)

    def store(self, s: Store, loops: list[_Loop]) -> None:
        accesses = [(s.buffer_var.name, s.index)]
        post_order_visit(s.value, lambda n: accesses.append((n.buffer_var.name, n.index))
                         if isinstance(n, Load) else None)
        total = math.prod(lp.extent for lp in loops)
        lanes = max((ix.lanes for _, ix in accesses if isinstance(ix, Ramp)), default=1)
        if total * lanes > self.main[0]:
            nest = list(loops)
            if lanes > 1:
                nest.append(_Loop(None, lanes, "vectorized"))
            self.main = (total * lanes, nest)
        for name, index in accesses:
            self.access(name, index, loops)

    def access(self, name: str, index, loops: list[_Loop]) -> None:
        nest = [(lp.extent, _uses(index, lp.var), lp.var) for lp in reversed(loops)]
        if isinstance(index, Ramp):
            stride = _const(index.stride, 1)
            nest.insert(0, (index.lanes, stride != 0, None))
            base = index.base
        else:
            base = index
        count = touch = 1
        f = self.feats
        for level, (ext, dep, _) in enumerate(nest[:MAX_LEVELS]):
            count *= ext
            if dep:
                touch *= ext
            f[f"{name}.count{level}"] += count
            f[f"{name}.touch{level}"] += touch
            f[f"{name}.reuse{level}"] += count / touch
        for _ext, dep, var in nest:
            if dep:
                c = 1 if var is None else _coef(base, var)
                f[f"{name}.stride"] += -1 if c is None else abs(c)
                break
        f[f"{name}.accesses"] += 1

    def finish(self) -> dict[str, float]:
        out = {k: math.log2(1 + v) if v >= 0 else -1.0 for k, v in self.feats.items()}
        nest = list(reversed(self.main[1]))[:MAX_LEVELS]
        outer = math.prod(lp.extent for lp in self.main[1])
        for level, lp in enumerate(nest):
            outer //= max(lp.extent, 1)
            out[f"loop{level}.extent"] = math.log2(1 + lp.extent)
            out[f"loop{level}.outer"] = math.log2(1 + outer)
            for k in _KINDS:
                out[f"loop{level}.{k}"] = 1.0 if lp.kind == k else 0.0
        out["loops"] = float(len(self.main[1]))
        return out


def get_itervar_feature(task, config) -> dict[str, float]:
    """Loop-nest features of ``config`` of ``task`` (instantiates and lowers it)."""
    from kiln.driver import lower

    sch, args = task.instantiate(config)
    mod = lower(sch, args)
    ex = _Extractor()
    for func in mod.functions.values():
        ex.stmt(func.body, [])
    return ex.finish()


def get_knob_feature(task, index: int) -> dict[str, float]:
    return {f"knob{i}": v for i, v in enumerate(task.config_space.knob_feature(index))}
