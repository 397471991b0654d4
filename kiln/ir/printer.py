"""Text form of the IR, in the book's pseudo-code style.

    produce c {
      for (i, 0, 100) {
        c[i] = (a[i] + b[i])
      }
    }
"""

from __future__ import annotations

from . import dtype as dt
from . import expr as E
from . import stmt as S

_BINOP = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.Div: "/", E.Mod: "%", E.EQ: "==", E.NE: "!=",
          E.LT: "<", E.LE: "<=", E.GT: ">", E.GE: ">=", E.And: "&&", E.Or: "||"}
_FUNC = {E.FloorDiv: "floordiv", E.FloorMod: "floormod", E.Min: "min", E.Max: "max"}


def _float_text(v: float, dtype: str) -> str:
    if v == int(v) and abs(v) < 1e15:
        s = str(int(v))
    else:
        s = repr(v)
    return s + {"float32": "f", "float16": "f16", "float64": ""}.get(dtype, "")


def expr_text(e) -> str:
    """One expression as text."""
    if isinstance(e, E.IterVar):
        return f"iter_var({e.var.name}, {range_text(e.dom)})"
    if isinstance(e, E.Var):
        return e.name
    if isinstance(e, E.IntImm):
        if e.dtype == "int32":
            return str(e.value)
        if e.dtype == "bool":
            return "True" if e.value else "False"
        return f"({e.dtype}){e.value}"
    if isinstance(e, E.FloatImm):
        return _float_text(e.value, e.dtype)
    if isinstance(e, E.StringImm):
        return f'"{e.value}"'
    op = _BINOP.get(type(e))
    if op is not None:
        if op in ("*", "/"):  # the book prints products tight: (i*m)
            return f"({expr_text(e.a)}{op}{expr_text(e.b)})"
        return f"({expr_text(e.a)} {op} {expr_text(e.b)})"
    fn = _FUNC.get(type(e))
    if fn is not None:
        return f"{fn}({expr_text(e.a)}, {expr_text(e.b)})"
    if isinstance(e, E.Not):
        return f"!{expr_text(e.a)}"
    if isinstance(e, E.Select):
        return (f"select({expr_text(e.condition)}, {expr_text(e.true_value)}, "
                f"{expr_text(e.false_value)})")
    if isinstance(e, E.Cast):
        return f"{e.dtype}({expr_text(e.value)})"
    if isinstance(e, E.Ramp):
        return f"ramp({expr_text(e.base)}, {expr_text(e.stride)}, {e.lanes})"
    if isinstance(e, E.Broadcast):
        return f"x{e.lanes}({expr_text(e.value)})"
    if isinstance(e, E.Let):
        return f"(let {e.var.name} = {expr_text(e.value)} in {expr_text(e.body)})"
    if isinstance(e, E.Call):
        return f"{e.op}({', '.join(expr_text(a) for a in e.args)})"
    if isinstance(e, E.Load):
        return f"{e.buffer_var.name}[{expr_text(e.index)}]"
    if isinstance(e, E.ProducerLoad):
        return f"{e.producer.name}[{', '.join(expr_text(i) for i in e.indices)}]"
    if isinstance(e, E.Reduce):
        axes = ", ".join(expr_text(a) for a in e.axis)
        src = ", ".join(expr_text(s) for s in e.source)
        return f"reduce(combiner={reducer_text(e.combiner)}, source=[{src}], axis=[{axes}])"
    if isinstance(e, E.CommReducer):
        return reducer_text(e)
    if isinstance(e, E.Range):
        return range_text(e)
    return f"<{type(e).__name__}>"


def reducer_text(r: E.CommReducer) -> str:
    res = ", ".join(expr_text(x) for x in r.result)
    ident = ", ".join(expr_text(x) for x in r.identity_element)
    return f"comm_reducer(result=[{res}], identity=[{ident}])"


def range_text(r) -> str:
    if r is None:
        return "None"
    return f"range(min={expr_text(r.min)}, ext={expr_text(r.extent)})"


class _StmtPrinter:
    def __init__(self):
        self.lines: list[str] = []
        self.indent = 0

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    def block(self, head: str, body) -> None:
        self.emit(head + " {")
        self.indent += 1
        self.print(body)
        self.indent -= 1
        self.emit("}")

    def print(self, s) -> None:
        if isinstance(s, S.SeqStmt):
            for x in s.seq:
                self.print(x)
        elif isinstance(s, S.For):
            kind = {S.ForKind.SERIAL: "for", S.ForKind.PARALLEL: "parallel",
                    S.ForKind.VECTORIZED: "vectorized", S.ForKind.UNROLLED: "unrolled",
                    S.ForKind.THREAD_BINDING: "thread"}[s.kind]
            self.block(f"{kind} ({s.loop_var.name}, {expr_text(s.min)}, "
                       f"{expr_text(s.extent)})", s.body)
        elif isinstance(s, S.AttrStmt):
            if s.attr_key == "produce":
                self.block(f"produce {s.node.name}", s.body)
                return
            node = s.node
            if isinstance(node, E.IterVar):
                name = node.var.name
            elif isinstance(node, E.Var):
                name = node.name
            elif isinstance(node, tuple):  # a buffer bound to a tensor (te.extern)
                name = ", ".join(getattr(x, "name", "?") for x in node)
            else:
                name = getattr(node, "name", type(node).__name__)
            val = s.value
            vtext = expr_text(val)
            self.emit(f"// attr [{name}] {s.attr_key} = {vtext}")
            self.print(s.body)
        elif isinstance(s, S.LetStmt):
            self.emit(f"{s.var.name} = {expr_text(s.value)}")
            self.print(s.body)
        elif isinstance(s, S.AssertStmt):
            self.emit(f'assert({expr_text(s.condition)}, "{s.message}")')
            self.print(s.body)
        elif isinstance(s, S.ProducerStore):
            idx = ", ".join(expr_text(i) for i in s.indices)
            self.emit(f"{s.producer.name}[{idx}] = {expr_text(s.value)}")
        elif isinstance(s, S.ProducerRealize):
            bounds = ", ".join(f"[{expr_text(r.min)}, {expr_text(r.extent)}]" for r in s.bounds)
            self.block(f"realize {s.producer.name}({bounds})", s.body)
        elif isinstance(s, S.Store):
            self.emit(f"{s.buffer_var.name}[{expr_text(s.index)}] = {expr_text(s.value)}")
        elif isinstance(s, S.Allocate):
            size = " * ".join(expr_text(e) for e in s.extents)
            if s.scope != "global":
                self.emit(f'// attr [{s.buffer_var.name}] storage_scope = "{s.scope}"')
            self.emit(f"allocate {s.buffer_var.name}[{dt.element_of(s.dtype)} * {size}]")
            self.print(s.body)
        elif isinstance(s, S.IfThenElse):
            self.block(f"if ({expr_text(s.condition)})", s.then_case)
            if s.else_case is not None:
                self.block("else", s.else_case)
        elif isinstance(s, S.Evaluate):
            self.emit(expr_text(s.value))
        elif isinstance(s, S.PrimFunc):
            params = ", ".join(p.name for p in s.params)
            self.emit(f"primfn {s.name}({params}) {{")
            self.indent += 1
            self.print(s.body)
            self.indent -= 1
            self.emit("}")
        else:
            self.emit(f"<{type(s).__name__}>")


def stmt_text(s) -> str:
    p = _StmtPrinter()
    p.print(s)
    return "\n".join(p.lines)


def to_text(node) -> str:
    """Text of any node: statements and functions over lines, expressions on one line."""
    if isinstance(node, S.PrimFunc):
        return stmt_text(node.body)
    if isinstance(node, S.Stmt):
        return stmt_text(node)
    if isinstance(node, S.Buffer):
        return _buffer_text(node)
    return expr_text(node)


def _buffer_text(buf) -> str:
    """``buffer(A, float32, [n, m])``, then the strides, offset and options a buffer from
    ``tir.decl_buffer`` sets (``strides=[s0, 1], elem_offset=A_elem_offset, ...``)."""
    parts = [buf.name, buf.dtype, f"[{', '.join(map(expr_text, buf.shape))}]"]
    if buf.strides:
        parts.append(f"strides=[{', '.join(map(expr_text, buf.strides))}]")
    if buf.elem_offset is not None:
        parts.append(f"elem_offset={expr_text(buf.elem_offset)}")
    if buf.offset_factor > 1:
        parts.append(f"offset_factor={buf.offset_factor}")
    if buf.buffer_type:
        parts.append(f'type="{buf.buffer_type}"')
    if buf.scope != "global":
        parts.append(f'scope="{buf.scope}"')
    return f"buffer({', '.join(parts)})"
