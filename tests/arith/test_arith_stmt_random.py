"""Randomized differential test of simplify_stmt: random loop nests with guards, lets and
asserts are run by a tiny interpreter before and after simplification; the sequences of
writes must be identical."""

from __future__ import annotations

import random

import pytest

from kiln.arith import evaluate, simplify_stmt
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.printer import to_text

BUF = E.Var("A", "handle")
N = E.Var("n")


def c(v: int) -> E.IntImm:
    return E.IntImm("int32", v)


class Gen:
    """Random statements over the loop variables in scope."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.count = 0

    def expr(self, vs, depth=2):
        r = self.r
        if depth == 0 or r.random() < 0.3:
            return r.choice(vs) if vs and r.random() < 0.8 else c(r.randint(-4, 9))
        a, b = self.expr(vs, depth - 1), self.expr(vs, depth - 1)
        k = r.random()
        if k < 0.3:
            return E.Add(a, b)
        if k < 0.45:
            return E.Sub(a, b)
        if k < 0.6:
            return E.Mul(a, c(r.choice([2, 3, 4, 8])))
        if k < 0.75:
            return E.FloorDiv(a, c(r.choice([2, 3, 4, 8])))
        if k < 0.9:
            return E.FloorMod(a, c(r.choice([2, 3, 4, 8])))
        return r.choice([E.Min, E.Max])(a, b)

    def cond(self, vs):
        op = self.r.choice([E.LT, E.LE, E.GT, E.GE, E.EQ, E.NE])
        e = op(self.expr(vs), self.expr(vs))
        if self.r.random() < 0.3:
            e = E.And(e, self.cond(vs))
        if self.r.random() < 0.2:
            e = E.Call("bool", "likely", [e])
        return e

    def stmt(self, vs, depth):
        r = self.r
        k = r.random()
        if depth == 0 or k < 0.25:
            return S.Store(BUF, self.expr(vs), self.expr(vs))
        if k < 0.55:
            self.count += 1
            v = E.Var(f"i{self.count}")
            lo = c(r.randint(-2, 2)) if r.random() < 0.8 else self.expr(vs, 1)
            ext = r.choice([c(0), c(1), c(r.randint(2, 5)), N, E.Sub(N, c(1))])
            kind = r.choice([S.ForKind.SERIAL] * 3 + [S.ForKind.UNROLLED])
            return S.For(v, lo, ext, kind, self.stmt(vs + [v], depth - 1))
        if k < 0.75:
            other = self.stmt(vs, depth - 1) if r.random() < 0.5 else None
            return S.IfThenElse(self.cond(vs), self.stmt(vs, depth - 1), other)
        if k < 0.85:
            self.count += 1
            v = E.Var(f"t{self.count}")
            return S.LetStmt(v, self.expr(vs), self.stmt(vs + [v], depth - 1))
        if k < 0.9:
            return S.AssertStmt(self.cond(vs), "check", self.stmt(vs, depth - 1))
        return S.seq(self.stmt(vs, depth - 1), self.stmt(vs, depth - 1))


class Failed(Exception):
    pass


def run(s, env, trace):
    """Execute ``s``; writes are appended to ``trace`` as (index, value)."""
    if isinstance(s, S.SeqStmt):
        for x in s.seq:
            run(x, env, trace)
    elif isinstance(s, S.For):
        lo, ext = evaluate(s.min, env), evaluate(s.extent, env)
        for v in range(lo, lo + ext):
            run(s.body, {**env, s.loop_var: v}, trace)
    elif isinstance(s, S.IfThenElse):
        if evaluate(s.condition, env):
            run(s.then_case, env, trace)
        elif s.else_case is not None:
            run(s.else_case, env, trace)
    elif isinstance(s, S.LetStmt):
        run(s.body, {**env, s.var: evaluate(s.value, env)}, trace)
    elif isinstance(s, S.AssertStmt):
        if not evaluate(s.condition, env):
            trace.append(("assert failed",))
            raise Failed
        run(s.body, env, trace)
    elif isinstance(s, S.Store):
        trace.append((evaluate(s.index, env), evaluate(s.value, env)))
    elif not isinstance(s, S.Evaluate):
        raise NotImplementedError(type(s).__name__)


def trace_of(s, n):
    trace: list = []
    try:
        run(s, {N: n}, trace)
    except Failed:
        pass
    return trace


@pytest.mark.parametrize("seed", range(150))
def test_simplify_stmt_preserves_writes(seed):
    g = Gen(seed)
    prog = g.stmt([], depth=4)
    out = simplify_stmt(prog)
    for n in (0, 1, 2, 5):
        assert trace_of(out, n) == trace_of(prog, n), \
            f"n={n}\n--- before\n{to_text(prog)}\n--- after\n{to_text(out)}"
