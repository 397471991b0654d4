"""Hybrid script → ``HybridOp``: a Python function's syntax tree turned into loop IR.

Called with te Tensors (and Python numbers or ``te.var`` scalars), a ``@te.hybrid.script``
function is not run: its source is parsed (``ast``) and each construct becomes IR over
tensors.

- ``for i in range(n)`` / ``range(a, b)`` / ``parallel`` / ``vectorize`` / ``unroll`` → a
  ``For`` of that kind counting from 0 (``i`` stands for the counter plus ``a``);
  ``const_range`` is unrolled while parsing (``i`` is a Python int); ``bind(tag, n)`` → a
  ``thread_extent`` attribute of ``te.thread_axis(tag)``;
- ``if`` / ``else`` → ``IfThenElse`` (a condition known while parsing picks its branch),
  ``a if c else b`` → ``if_then_else``;
- ``c = output_tensor(shape, dtype)`` declares an output, ``t = allocate(shape, dtype,
  scope)`` a buffer realized in the loop body (or function) that declares it;
- ``x = e`` declares a local scalar: a one-element buffer realized where it is first
  assigned, or a plain constant when it is assigned once to a number (as in TVM);
- ``a[i, j]`` (or ``a[i][j]``) reads a tensor, ``c[i, j] = e`` and ``c[i] += e`` write one;
  ``a.shape`` is the shape tuple;
- numbers, arithmetic, comparisons, ``and``/``or``/``not``, ``max``/``min``, math intrinsics
  (``sqrt``, ``exp``, ``log``, ``tanh``, ``sigmoid``, ``power``, ...), casts
  (``float32(x)``, ``int32(x)``), ``likely``, ``ceil_div``; Python constants of the
  function's globals and closure;
- ``return c`` / ``return c, d``, the last statement, names the outputs in order.

Anything else raises ``HybridScriptError`` naming the function and the line.
"""

from __future__ import annotations

import ast
import operator
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kiln.arith import simplify
from kiln.errors import HybridScriptError
from kiln.ir import dtype as dt
from kiln.ir.expr import EQ, GE, GT, LE, LT, NE, IntImm, PrimExpr, ProducerLoad, Range, Var
from kiln.ir.op import (
    cast,
    compare,
    convert,
    emax,
    emin,
    floordiv,
    floormod,
    logical_and,
    logical_not,
    logical_or,
    make_const,
)
from kiln.ir.stmt import (
    AttrStmt,
    For,
    ForKind,
    IfThenElse,
    ProducerRealize,
    ProducerStore,
    Stmt,
    seq,
)
from kiln.tir import op as tir

from ..operation import thread_axis
from ..tensor import PlaceholderOp, Tensor, TensorSlice
from .operation import HybridOp
from .runtime import CAST_DTYPES, LOOP_KINDS

_FOR_KIND = {"range": ForKind.SERIAL, "parallel": ForKind.PARALLEL,
             "vectorize": ForKind.VECTORIZED, "unroll": ForKind.UNROLLED}

_MATH = {"sqrt": tir.sqrt, "rsqrt": tir.rsqrt, "exp": tir.exp, "log": tir.log,
         "tanh": tir.tanh, "sigmoid": tir.sigmoid, "power": tir.power, "floor": tir.floor,
         "ceil": tir.ceil, "abs": tir.abs, "round": tir.round, "trunc": tir.trunc,
         "likely": tir.likely}

_MIN_MAX = {"max": (emax, max), "min": (emin, min)}

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
}

_COMPARE = {ast.Lt: (operator.lt, LT), ast.LtE: (operator.le, LE), ast.Gt: (operator.gt, GT),
            ast.GtE: (operator.ge, GE), ast.Eq: (operator.eq, EQ), ast.NotEq: (operator.ne, NE)}


@dataclass
class _Buffer:
    """A tensor the function names: an input, an output, an ``allocate`` buffer or a
    local scalar (a one-element buffer)."""

    tensor: Tensor
    kind: str  # "input" | "output" | "buffer" | "scalar"
    scope: str = "global"


def parse_to_op(func: Callable, tree: ast.FunctionDef, first_line: int, args: tuple,
                constants: dict[str, Any]) -> Tensor | list[Tensor]:
    """The output tensor(s) of the HybridOp that ``func``'s syntax ``tree`` describes,
    applied to ``args``; ``constants`` are the Python values its free names may refer to."""
    parser = _Parser(func.__name__, first_line, constants)
    op = parser.parse(tree, args)
    return op.outputs[0] if len(op.outputs) == 1 else list(op.outputs)


def _is_number(x) -> bool:
    return isinstance(x, bool | int | float)


class _Parser:
    """One parse of a hybrid function: ``symbols`` maps each name in scope to a ``_Buffer``,
    a loop variable's value or a constant; ``scopes`` lists, per loop body (and the function
    body), the names declared there, realized around it and forgotten after it."""

    def __init__(self, name: str, first_line: int, constants: dict[str, Any]):
        self.name = name
        self.first_line = first_line
        self.constants = constants
        self.symbols: dict[str, Any] = {}
        self.loop_vars: set[str] = set()
        self.scopes: list[list[str]] = []
        self.outputs: list[str] = []
        self.store_counts: Counter[str] = Counter()

    # ---- errors ---------------------------------------------------------------------------
    def error(self, node: ast.AST, message: str) -> HybridScriptError:
        line = self.first_line + getattr(node, "lineno", 1) - 1
        return HybridScriptError(f"hybrid function '{self.name}', line {line}: {message}")

    def input_written(self, node: ast.AST, name: str) -> HybridScriptError:
        return self.error(node, f"writing to input tensor '{name}'; a hybrid function writes "
                                f"only its output_tensor(...) and allocate(...) buffers")

    # ---- the function -----------------------------------------------------------------------
    def parse(self, tree: ast.FunctionDef, args: tuple) -> HybridOp:
        params = [a.arg for a in tree.args.args]
        if tree.args.vararg or tree.args.kwarg or tree.args.kwonlyargs or \
                len(params) != len(args):
            raise self.error(tree, f"takes the parameters ({', '.join(params)}) but was "
                                   f"called with {len(args)} arguments")
        inputs = []
        for name, value in zip(params, args, strict=True):
            if isinstance(value, Tensor):
                self.symbols[name] = _Buffer(value, "input")
                inputs.append(value)
            elif isinstance(value, PrimExpr) or _is_number(value):
                self.symbols[name] = value
            else:
                raise self.error(tree, f"argument '{name}' must be a te Tensor, a te.var or a "
                                       f"number, got {type(value).__name__}")
        self.store_counts = _store_counts(tree)
        statements = tree.body
        if statements and isinstance(statements[0], ast.Expr) and \
                isinstance(statements[0].value, ast.Constant):
            statements = statements[1:]  # the docstring
        if not statements or not isinstance(statements[-1], ast.Return):
            raise self.error(tree, "a hybrid function must end with 'return <output tensors>'")
        returned: list[Tensor] = []

        def function_body() -> Stmt:
            body = self.block(statements[:-1])
            returned.extend(self.outputs_of(statements[-1]))
            return body

        body = self.scoped(function_body)
        return HybridOp(self.name, "", None, inputs, returned, body)

    def scoped(self, make: Callable[[], Stmt]) -> Stmt:
        """``make()``'s statement with the buffers it declares realized around it."""
        self.scopes.append([])
        body = make()
        for name in reversed(self.scopes.pop()):
            buf = self.symbols.pop(name)
            if isinstance(buf, _Buffer) and buf.kind in ("buffer", "scalar"):
                t = buf.tensor
                bounds = [Range.from_min_extent(0, extent) for extent in t.shape]
                body = ProducerRealize(t, bounds, IntImm("bool", 1), body, scope=buf.scope)
        return body

    def declare(self, name: str, value: Any) -> None:
        self.symbols[name] = value
        self.scopes[-1].append(name)

    def block(self, statements: list[ast.stmt]) -> Stmt:
        return seq(*(self.stmt(s) for s in statements))

    # ---- statements ---------------------------------------------------------------------------
    def stmt(self, node: ast.stmt) -> Stmt | None:
        visit = getattr(self, "stmt_" + type(node).__name__, None)
        if visit is None:
            raise self.error(node, f"unsupported statement '{type(node).__name__}' (hybrid "
                                   f"script has for loops, if/else, assignments and return)")
        try:
            return visit(node)
        except HybridScriptError:
            raise
        except (TypeError, ValueError, IndexError) as e:
            raise self.error(node, str(e)) from e

    def stmt_Pass(self, node: ast.Pass) -> None:
        return None

    def stmt_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None  # a string used as a comment
        raise self.error(node, "unsupported statement: an expression whose value is unused")

    def stmt_Return(self, node: ast.Return) -> None:
        raise self.error(node, "'return' must be the last statement of the hybrid function")

    def outputs_of(self, node: ast.Return) -> list[Tensor]:
        """The output tensors the final ``return`` names, in its order."""
        if node.value is None:
            raise self.error(node, "a hybrid function returns its output tensors")
        values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
        names = []
        for v in values:
            if not (isinstance(v, ast.Name) and v.id in self.outputs):
                raise self.error(node, "a hybrid function returns the tensors it declared "
                                       "with output_tensor(...)")
            names.append(v.id)
        if len(set(names)) != len(names):
            raise self.error(node, "an output tensor is returned twice")
        if len(names) != len(self.outputs):
            raise self.error(node, f"wrong number of return values: {len(names)} returned but "
                                   f"{len(self.outputs)} output tensors declared "
                                   f"({', '.join(self.outputs)})")
        return [self.symbols[n].tensor for n in names]

    def stmt_Assign(self, node: ast.Assign) -> Stmt | None:
        if len(node.targets) != 1 or isinstance(node.targets[0], ast.Tuple | ast.List):
            raise self.error(node, "assign one value at a time (no 'a = b = ...' or tuple "
                                   "unpacking)")
        target = node.targets[0]
        if isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) and \
                node.value.func.id in ("output_tensor", "allocate"):
            return self.declare_buffer(target, node.value)
        return self.assign(target, self.expr(node.value))

    def stmt_AugAssign(self, node: ast.AugAssign) -> Stmt | None:
        fn = _BINOPS.get(type(node.op))
        if fn is None:
            raise self.error(node, f"unsupported operator '{type(node.op).__name__}'")
        current = self.expr(node.target)  # the target read: c[i] += 1 reads c[i]
        return self.assign(node.target, _binop(fn, current, self.expr(node.value)))

    def declare_buffer(self, target: ast.expr, call: ast.Call) -> None:
        kind = call.func.id
        if not isinstance(target, ast.Name) or target.id in self.symbols:
            raise self.error(call, f"{kind}(...) must be assigned to a new name")
        args = [self.expr(a) for a in call.args]
        kwargs = {k.arg: self.expr(k.value) for k in call.keywords}
        shape, dtype, scope = _buffer_args(*args, **kwargs)
        shape = tuple(shape) if isinstance(shape, tuple | list) else (shape,)
        tensor = PlaceholderOp(target.id, shape, dt.normalize(dtype)).output(0)
        if kind == "output_tensor":
            self.outputs.append(target.id)
            self.declare(target.id, _Buffer(tensor, "output"))
        else:
            self.declare(target.id, _Buffer(tensor, "buffer", scope))
        return None

    def assign(self, target: ast.expr, value: Any) -> Stmt | None:
        if isinstance(target, ast.Subscript):
            tensor, indices = self.element(target)
            return self.store(target, tensor, indices, value)
        if not isinstance(target, ast.Name):
            raise self.error(target, "assign to a name or to a tensor element")
        name = target.id
        if name in self.loop_vars:
            raise self.error(target, f"loop variable '{name}' cannot be assigned")
        if name not in self.symbols:
            if self.store_counts[name] == 1 and _is_number(value):
                self.declare(name, value)
                return None
            value = convert(value)
            scalar = PlaceholderOp(name, (1,), value.dtype).output(0)
            self.declare(name, _Buffer(scalar, "scalar"))
        sym = self.symbols[name]
        if not isinstance(sym, _Buffer):
            raise self.error(target, f"'{name}' is a constant (an argument or a value "
                                     f"assigned once); it cannot be assigned again")
        if sym.kind == "scalar":
            return self.store(target, sym.tensor, [0], value)
        if sym.kind == "input":
            raise self.input_written(target, name)
        raise self.error(target, f"cannot assign tensor '{name}' as a whole; write its "
                                 f"elements, e.g. {name}[i] = ...")

    def element(self, node: ast.Subscript) -> tuple[Tensor, list]:
        """The tensor and indices of ``t[i, j]`` or ``t[i][j]``."""
        parts: list[ast.expr] = []
        while isinstance(node, ast.Subscript):
            index = node.slice
            parts[:0] = index.elts if isinstance(index, ast.Tuple) else [index]
            node = node.value
        if not isinstance(node, ast.Name) or not isinstance(self.symbols.get(node.id), _Buffer):
            raise self.error(node, "only tensor elements can be written: name[i, ...] = ...")
        buf = self.symbols[node.id]
        if buf.kind == "input":
            raise self.input_written(node, node.id)
        return buf.tensor, [self.expr(p) for p in parts]

    def store(self, node: ast.AST, tensor: Tensor, indices: list, value: Any) -> Stmt:
        if len(indices) != tensor.ndim:
            raise self.error(node, f"tensor '{tensor.name}' has {tensor.ndim} dimensions but "
                                   f"is written with {len(indices)} indices")
        value = convert(value)
        if value.dtype != tensor.dtype:
            value = cast(value, tensor.dtype)
        return ProducerStore(tensor, value, [convert(i) for i in indices])

    def stmt_For(self, node: ast.For) -> Stmt:
        call = node.iter
        kind = call.func.id if isinstance(call, ast.Call) and \
            isinstance(call.func, ast.Name) else None
        if kind not in LOOP_KINDS or node.orelse:
            raise self.error(node, f"a for loop iterates over one of {', '.join(LOOP_KINDS)} "
                                   f"(no else branch)")
        if not isinstance(node.target, ast.Name) or node.target.id in self.symbols:
            raise self.error(node, "the loop variable must be a new name")
        args = [self.expr(a) for a in call.args]
        if kind == "bind":
            return self.thread_loop(node, args)
        if len(args) not in (1, 2):
            raise self.error(node, f"{kind}(extent) or {kind}(begin, end)")
        low, high = (0, args[0]) if len(args) == 1 else args
        if kind == "const_range":
            if not (isinstance(low, int) and isinstance(high, int)):
                raise self.error(node, "const_range needs constant bounds (it is unrolled "
                                       "while parsing)")
            return seq(*(self.loop_body(node, v) for v in range(low, high)))
        extent = _simplify(high - low)
        var = Var(node.target.id, "int64" if _dtype(extent) == "int64" else "int32")
        body = self.loop_body(node, var if _is_zero(low) else var + low)
        return For(var, 0, extent, _FOR_KIND[kind], body)

    def thread_loop(self, node: ast.For, args: list) -> Stmt:
        if len(args) != 2 or not isinstance(args[0], str):
            raise self.error(node, "bind(thread_tag, extent), e.g. bind('threadIdx.x', 64)")
        tag, extent = args
        thread = thread_axis((0, extent), tag)
        body = self.loop_body(node, thread.var)
        return AttrStmt(thread, "thread_extent", extent, body)

    def loop_body(self, node: ast.For, value: Any) -> Stmt:
        name = node.target.id
        self.symbols[name] = value
        self.loop_vars.add(name)
        try:
            return self.scoped(lambda: self.block(node.body))
        finally:
            del self.symbols[name]
            self.loop_vars.discard(name)

    def stmt_If(self, node: ast.If) -> Stmt | None:
        cond = self.expr(node.test)
        if not isinstance(cond, PrimExpr):
            return self.block(node.body if cond else node.orelse)
        then_case = self.block(node.body)
        else_case = self.block(node.orelse) if node.orelse else None
        return IfThenElse(_as_bool(cond), then_case, else_case)

    # ---- expressions --------------------------------------------------------------------------
    def expr(self, node: ast.expr) -> Any:
        visit = getattr(self, "expr_" + type(node).__name__, None)
        if visit is None:
            raise self.error(node, f"unsupported expression '{type(node).__name__}'")
        return visit(node)

    def expr_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def expr_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.expr(e) for e in node.elts)

    expr_List = expr_Tuple

    def expr_Name(self, node: ast.Name) -> Any:
        if node.id in self.symbols:
            sym = self.symbols[node.id]
            if isinstance(sym, _Buffer):
                return ProducerLoad(sym.tensor, [IntImm("int32", 0)]) \
                    if sym.kind == "scalar" else sym.tensor
            return sym
        value = self.constants.get(node.id)
        if _is_number(value) or isinstance(value, str):
            return value
        raise self.error(node, f"undefined variable '{node.id}'")

    def expr_Attribute(self, node: ast.Attribute) -> Any:
        value = self.expr(node.value)
        if isinstance(value, Tensor) and node.attr == "shape":
            return tuple(s.value if isinstance(s, IntImm) else s for s in value.shape)
        if isinstance(value, Tensor) and node.attr == "dtype":
            return value.dtype
        raise self.error(node, f"unsupported attribute '.{node.attr}' (tensors have .shape "
                               f"and .dtype)")

    def expr_Subscript(self, node: ast.Subscript) -> Any:
        value = self.expr(node.value)
        if isinstance(node.slice, ast.Slice):
            raise self.error(node, "slices are not supported; index one element")
        index = self.expr(node.slice)
        if isinstance(value, Tensor | TensorSlice):
            return value[index]
        if isinstance(value, tuple) and isinstance(index, int):
            return value[index]
        raise self.error(node, "only tensors and shapes can be indexed")

    def expr_BinOp(self, node: ast.BinOp) -> Any:
        fn = _BINOPS.get(type(node.op))
        if fn is None:
            raise self.error(node, f"unsupported operator '{type(node.op).__name__}'")
        return _binop(fn, self.expr(node.left), self.expr(node.right))

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            return logical_not(value) if isinstance(value, PrimExpr) else not value
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return value
        raise self.error(node, f"unsupported operator '{type(node.op).__name__}'")

    def expr_Compare(self, node: ast.Compare) -> Any:
        result: Any = True
        left = self.expr(node.left)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.expr(right_node)
            if type(op) not in _COMPARE:
                raise self.error(node, f"unsupported comparison '{type(op).__name__}'")
            py_op, node_cls = _COMPARE[type(op)]
            if isinstance(left, PrimExpr) or isinstance(right, PrimExpr):
                one = compare(node_cls, left, right)
            else:
                one = py_op(left, right)
            result = _logical(logical_and, result, one)
            left = right
        return result

    def expr_BoolOp(self, node: ast.BoolOp) -> Any:
        fn = logical_and if isinstance(node.op, ast.And) else logical_or
        values = [self.expr(v) for v in node.values]
        result = values[0]
        for v in values[1:]:
            result = _logical(fn, result, v)
        return result

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.expr(node.test)
        if not isinstance(cond, PrimExpr):
            return self.expr(node.body if cond else node.orelse)
        return tir.if_then_else(cond, self.expr(node.body), self.expr(node.orelse))

    def expr_Call(self, node: ast.Call) -> Any:
        if not isinstance(node.func, ast.Name) or node.keywords:
            raise self.error(node, "only the hybrid-script intrinsics can be called, with "
                                   "positional arguments")
        name = node.func.id
        args = [self.expr(a) for a in node.args]
        if name in _MATH:
            return _MATH[name](*args)
        if name in _MIN_MAX and len(args) >= 2:
            return _fold(*_MIN_MAX[name], args)
        if name in CAST_DTYPES and len(args) == 1:
            x = args[0]
            return make_const(x, name) if _is_number(x) else cast(x, name)
        if name == "ceil_div" and len(args) == 2:
            a, b = args
            return (a + b - 1) // b
        if name in ("output_tensor", "allocate"):
            raise self.error(node, f"{name}(...) must be assigned to a name: x = {name}(...)")
        if name in LOOP_KINDS:
            raise self.error(node, f"{name}(...) is only a for loop's range")
        raise self.error(node, f"unsupported function call '{name}'")


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def _store_counts(tree: ast.FunctionDef) -> Counter[str]:
    """How many statements assign each local name (a name assigned once to a number is a
    constant)."""
    counts: Counter[str] = Counter()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign) else []
        counts.update(t.id for t in targets if isinstance(t, ast.Name))
    return counts


def _buffer_args(shape, dtype: str = "float32", scope: str = "global"):
    """``output_tensor(shape, dtype)`` / ``allocate(shape, dtype, scope)`` arguments."""
    return shape, dtype, scope


def _binop(fn: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    if isinstance(a, PrimExpr) or isinstance(b, PrimExpr):
        if fn is operator.floordiv:
            return floordiv(a, b)
        if fn is operator.mod:
            return floormod(a, b)
        if fn is operator.pow:
            return tir.power(a, b)
    return fn(a, b)


def _logical(fn: Callable[[Any, Any], PrimExpr], a: Any, b: Any) -> Any:
    if isinstance(a, PrimExpr) or isinstance(b, PrimExpr):
        return fn(a, b)
    return (a and b) if fn is logical_and else (a or b)


def _fold(symbolic: Callable[[PrimExpr, PrimExpr], PrimExpr],
          python: Callable[[Any, Any], Any], args: list) -> Any:
    """``max``/``min`` of several values: a number where all are numbers."""
    result = args[0]
    for x in args[1:]:
        if isinstance(result, PrimExpr) or isinstance(x, PrimExpr):
            result = symbolic(convert(result), convert(x))
        else:
            result = python(result, x)
    return result


def _as_bool(cond: PrimExpr) -> PrimExpr:
    return cond if dt.is_bool(cond.dtype) else cond != make_const(0, cond.dtype)


def _simplify(e: Any) -> Any:
    return simplify(e) if isinstance(e, PrimExpr) else e


def _dtype(e: Any) -> str:
    return e.dtype if isinstance(e, PrimExpr) else "int32"


def _is_zero(e: Any) -> bool:
    return (isinstance(e, int) and e == 0) or (isinstance(e, IntImm) and e.value == 0)
