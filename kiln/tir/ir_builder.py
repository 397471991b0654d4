"""``tvm.tir.ir_builder``: build a loop-IR statement imperatively, as classic TVM's extern ops do.

``ib = create()`` opens a builder; ``with ib.for_range(0, n) as i:``, ``with ib.if_scope(c):``
/ ``with ib.else_scope():``, ``with ib.new_scope():``, ``ib.scope_attr``, ``ib.let`` and
``ib.allocate`` nest what is emitted inside them; ``ib.get()`` returns the whole statement.
Buffers are reached through ``BufferVar`` handles (``ib.buffer_ptr``, ``ib.allocate``,
``ib.pointer``): ``A[i]`` is a flat ``Load`` and ``A[i] = v`` emits a flat ``Store``; a tuple
index ``A[i, j]`` is flattened over the handle's buffer (row-major unless it has strides).

Guarantee: the statement returned by ``get`` holds exactly what was emitted, in order, each
scope wrapping only the statements emitted after it opened and before it closed.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.ir import dtype as dt
from kiln.ir.expr import IntImm, Load, PrimExpr, Ramp, StringImm, Var
from kiln.ir.op import const, convert
from kiln.ir.stmt import (
    Allocate,
    AttrStmt,
    Buffer,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    SeqStmt,
    Stmt,
    Store,
)

from .op import likely as _likely

# An entry of a scope: a finished statement, or a wrapper waiting for the statements after it.
_Entry = Stmt | Callable[[Stmt], Stmt]

_FOR_KINDS = {
    "serial": ForKind.SERIAL,
    "parallel": ForKind.PARALLEL,
    "vectorize": ForKind.VECTORIZED,
    "unroll": ForKind.UNROLLED,
}


class WithScope:
    """A ``with`` block that yields ``enter_value`` and calls ``exit_cb`` when it closes."""

    def __init__(self, enter_value, exit_cb: Callable[[], None]):
        self._enter_value = enter_value
        self._exit_cb = exit_cb

    def __enter__(self):
        return self._enter_value

    def __exit__(self, ptype, value, trace) -> None:
        self._exit_cb()


def flat_index(index, buffer: Buffer | None) -> PrimExpr:
    """``index`` as one element offset: a tuple is flattened over ``buffer``'s strides
    (row-major unless the buffer declares strides)."""
    if not isinstance(index, tuple):
        return convert(index)
    if buffer is None or len(index) != len(buffer.shape):
        raise ValueError(f"index {index} does not match the buffer's shape "
                         f"{None if buffer is None else buffer.shape}")
    offset: PrimExpr = convert(0)
    for idx, stride in zip(index, buffer.dense_strides(), strict=True):
        offset = offset + convert(idx) * stride
    return offset


class BufferVar:
    """A handle on a buffer's data pointer: ``h[i]`` loads, ``h[i] = v`` emits a store.

    A vector ``content_type`` (``float32x4``) reads and writes ``lanes`` consecutive
    elements at ``i * lanes``.
    """

    def __init__(self, builder: IRBuilder, buffer_var: Var, buffer: Buffer | None,
                 content_type: str):
        """``buffer`` gives the shape a tuple index flattens over (None: flat indices only)."""
        self._builder = builder
        self._buffer_var = buffer_var
        self._buffer = buffer
        self._content_type = dt.normalize(content_type)

    @property
    def data(self) -> Var:
        return self._buffer_var

    @property
    def dtype(self) -> str:
        return self._content_type

    def asobject(self) -> Var:
        return self._buffer_var

    def _element_index(self, index) -> PrimExpr:
        offset = flat_index(index, self._buffer)
        lanes = dt.parse(self._content_type).lanes
        if lanes == 1:
            return offset
        return Ramp(offset * lanes, const(1, offset.dtype), lanes)

    def __getitem__(self, index) -> PrimExpr:
        return Load(self._content_type, self._buffer_var, self._element_index(index))

    def __setitem__(self, index, value) -> None:
        value = convert(value)
        if value.dtype != self._content_type:
            raise ValueError(
                f"data type does not match content type {value.dtype} vs {self._content_type}")
        self._builder.emit(Store(self._buffer_var, value, self._element_index(index)))


class IRBuilder:
    """Collects emitted statements in a stack of open scopes (use ``create()``)."""

    def __init__(self) -> None:
        self._seq_stack: list[list[_Entry]] = [[]]
        self.nidx = 0

    def _pop_seq(self) -> Stmt:
        """Close the innermost scope: its entries as one statement, wrappers applied."""
        entries = self._seq_stack.pop()
        if not entries or callable(entries[-1]):
            entries.append(Evaluate(0))
        tail: list[Stmt] = []
        for entry in reversed(entries):
            tail = [entry(_as_stmt(tail))] if callable(entry) else [entry, *tail]
        return _as_stmt(tail)

    def emit(self, stmt) -> None:
        """Append a statement (a bare expression becomes ``Evaluate``), or a callable that
        will wrap every statement emitted after it in the current scope."""
        if isinstance(stmt, PrimExpr):
            stmt = Evaluate(stmt)
        if not (isinstance(stmt, Stmt) or callable(stmt)):
            raise TypeError(f"emit expects a Stmt or a callable, got {type(stmt).__name__}")
        self._seq_stack[-1].append(stmt)

    def scope_attr(self, node, attr_key: str, value) -> None:
        """Wrap the rest of the current scope in ``AttrStmt(node, attr_key, value)``."""
        node = StringImm(node) if isinstance(node, str) else node
        value = StringImm(value) if isinstance(value, str) else value
        self.emit(lambda body: AttrStmt(node, attr_key, value, body))

    def for_range(self, begin, end, name: str = "i", dtype: str = "int32",
                  kind: str = "serial") -> WithScope:
        """A loop from ``begin`` to ``end``; the ``with`` block gets the loop variable.
        Default names run ``i``, ``j``, ``k``, then ``i_3``, ``i_4``, ... as in TVM."""
        if kind not in _FOR_KINDS:
            raise ValueError(f"Unknown kind {kind!r}; expected one of {sorted(_FOR_KINDS)}")
        if name == "i":
            name = chr(ord("i") + self.nidx) if self.nidx < 3 else f"i_{self.nidx}"
            self.nidx += 1
        self._seq_stack.append([])
        loop_var = Var(name, dtype)
        extent = end if _is_zero(begin) else convert(end) - begin

        def _exit_cb() -> None:
            self.emit(For(loop_var, begin, extent, _FOR_KINDS[kind], self._pop_seq()))

        return WithScope(loop_var, _exit_cb)

    def if_scope(self, cond) -> WithScope:
        """``if (cond)`` around the statements of the ``with`` block."""
        self._seq_stack.append([])

        def _exit_cb() -> None:
            self.emit(IfThenElse(convert(cond), self._pop_seq(), None))

        return WithScope(None, _exit_cb)

    def else_scope(self) -> WithScope:
        """The ``else`` branch of the ``if_scope`` just closed."""
        prev = self._seq_stack[-1][-1] if self._seq_stack[-1] else None
        if not isinstance(prev, IfThenElse) or prev.else_case is not None:
            raise RuntimeError("else_scope can only follow an if_scope")
        self._seq_stack[-1].pop()
        self._seq_stack.append([])

        def _exit_cb() -> None:
            self.emit(IfThenElse(prev.condition, prev.then_case, self._pop_seq()))

        return WithScope(None, _exit_cb)

    def new_scope(self) -> WithScope:
        """A nested scope: wrappers emitted inside it (``let``, ``allocate``, ``scope_attr``)
        end where the ``with`` block ends."""
        self._seq_stack.append([])

        def _exit_cb() -> None:
            self.emit(self._pop_seq())

        return WithScope(None, _exit_cb)

    def let(self, var_name: str, value) -> Var:
        """Bind ``value`` to a new variable for the rest of the current scope."""
        value = convert(value)
        var = Var(var_name, value.dtype)
        self.emit(lambda body: LetStmt(var, value, body))
        return var

    def allocate(self, dtype: str, shape, name: str = "buf", scope: str = "global") -> BufferVar:
        """Allocate a ``shape`` buffer of ``dtype`` for the rest of the current scope."""
        shape = list(shape) if isinstance(shape, (list, tuple)) else [shape]
        buffer_var = Var(name, "handle")
        scope = scope or "global"
        self.emit(lambda body: Allocate(buffer_var, dtype, shape, IntImm("bool", 1), body,
                                        scope=scope))
        return BufferVar(self, buffer_var, Buffer(buffer_var, dtype, shape, name, scope=scope),
                         dtype)

    def pointer(self, content_type: str, name: str = "ptr") -> BufferVar:
        """A fresh ``handle`` variable to read and write as ``content_type`` elements."""
        return BufferVar(self, Var(name, "handle"), None, content_type)

    def buffer_ptr(self, buf: Buffer, shape=None) -> BufferVar:
        """A handle on ``buf``'s data, indexed over ``buf``'s shape (or ``shape``)."""
        view = buf if shape is None else Buffer(buf.data, buf.dtype, shape, buf.name,
                                                scope=buf.scope)
        return BufferVar(self, buf.data, view, buf.dtype)

    def likely(self, expr) -> PrimExpr:
        """``likely(expr)``: a hint that ``expr`` is usually true."""
        return _likely(convert(expr))

    def get(self) -> Stmt:
        """The statement built so far; every ``with`` scope must be closed."""
        stmt = self._pop_seq()
        if self._seq_stack:
            raise RuntimeError("cannot call get inside construction scope")
        return stmt


def create() -> IRBuilder:
    """A new, empty IRBuilder."""
    return IRBuilder()


def _as_stmt(stmts: list[Stmt]) -> Stmt:
    return stmts[0] if len(stmts) == 1 else SeqStmt(stmts)


def _is_zero(value) -> bool:
    return (isinstance(value, int) and value == 0) or (isinstance(value, IntImm)
                                                     and value.value == 0)
