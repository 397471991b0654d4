"""Index arithmetic made concrete: a loop nest's iteration space as numpy arrays.

VTA programs have static shapes, so the code generator evaluates the host loops around each
accelerator operation (``kiln.vta.codegen``) and, inside an operation, every index of its
loop nest at once: :func:`nest_grid` binds each loop variable to an array broadcast along
its own axis, and :func:`evaluate` computes an integer expression over those arrays (or over
plain ints), exactly, in int64.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kiln.ir import expr as E
from kiln.ir import stmt as S

__all__ = ["evaluate", "evaluate_int", "perfect_nest", "nest_grid", "Loop"]

Loop = tuple[E.Var, int, int]  # (variable, min, extent)

_BINARY = {
    E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.FloorDiv: np.floor_divide,
    E.FloorMod: np.mod, E.Min: np.minimum, E.Max: np.maximum, E.EQ: np.equal,
    E.NE: np.not_equal, E.LT: np.less, E.LE: np.less_equal, E.GT: np.greater,
    E.GE: np.greater_equal, E.And: np.logical_and, E.Or: np.logical_or,
}


def evaluate(expr: E.PrimExpr, env: Mapping[E.Var, object]):
    """The value of the integer (or boolean) ``expr`` with variables bound by ``env``; the
    result is a numpy scalar or array, broadcast like the bound arrays."""
    if isinstance(expr, E.IntImm):
        return np.int64(expr.value)
    if isinstance(expr, E.Var):
        if expr not in env:
            raise NotImplementedError(
                f"VTA code generation: '{expr.name}' has no value at build time (VTA programs "
                "need static shapes and loop bounds)")
        return env[expr]
    for cls, fn in _BINARY.items():
        if type(expr) is cls:
            return fn(evaluate(expr.a, env), evaluate(expr.b, env))
    if isinstance(expr, (E.Div, E.Mod)):  # truncating, as C
        a, b = evaluate(expr.a, env), evaluate(expr.b, env)
        q = np.trunc(np.divide(a, b)).astype(np.int64)
        return q if isinstance(expr, E.Div) else a - q * b
    if isinstance(expr, E.Not):
        return np.logical_not(evaluate(expr.a, env))
    if isinstance(expr, E.Select):
        return np.where(evaluate(expr.condition, env), evaluate(expr.true_value, env),
                        evaluate(expr.false_value, env))
    if isinstance(expr, E.Cast):
        return evaluate(expr.value, env)
    if isinstance(expr, E.Let):
        return evaluate(expr.body, {**env, expr.var: evaluate(expr.value, env)})
    if isinstance(expr, E.Call) and expr.op == "likely":
        return evaluate(expr.args[0], env)
    if isinstance(expr, E.Call) and expr.op in ("if_then_else", "tvm_if_then_else"):
        cond, a, b = expr.args
        return np.where(evaluate(cond, env), evaluate(a, env), evaluate(b, env))
    raise NotImplementedError(f"VTA code generation: cannot evaluate {expr} at build time")


def evaluate_int(expr: E.PrimExpr, env: Mapping[E.Var, object]) -> int:
    """``evaluate`` for an expression that must be one integer."""
    value = np.asarray(evaluate(expr, env))
    if value.size != 1:
        raise NotImplementedError(f"VTA code generation: {expr} is not a single value here")
    return int(value.reshape(-1)[0])


def perfect_nest(stmt: S.Stmt, env: Mapping[E.Var, object]) -> tuple[list[Loop], S.Stmt]:
    """The loops of a perfect loop nest (bounds evaluated under ``env``) and its body."""
    loops: list[Loop] = []
    while isinstance(stmt, (S.For, S.AttrStmt)):
        if isinstance(stmt, S.For):
            loops.append((stmt.loop_var, evaluate_int(stmt.min, env),
                          evaluate_int(stmt.extent, env)))
        stmt = stmt.body
    return loops, stmt


def nest_grid(loops: list[Loop], env: Mapping[E.Var, object]) -> dict:
    """``env`` plus each loop variable bound to ``min + arange(extent)`` along its own axis
    of an array of shape ``[extent for each loop]``."""
    grid = dict(env)
    k = len(loops)
    for axis, (var, lo, extent) in enumerate(loops):
        shape = [1] * k
        shape[axis] = extent
        grid[var] = (lo + np.arange(extent, dtype=np.int64)).reshape(shape)
    return grid


def full(value, loops: list[Loop]) -> np.ndarray:
    """``value`` broadcast over the whole iteration space, flattened in loop order."""
    shape = tuple(extent for _, _, extent in loops)
    return np.broadcast_to(np.asarray(value), shape).reshape(-1)
