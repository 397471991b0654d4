"""C code generation for the CPU: one lowered PrimFunc → C11 (GNU) source.

Each PrimFunc becomes two C functions: ``<name>_compute`` taking typed ``restrict`` pointers and
scalars (the loop program), and the exported packed entry ``<name>`` that checks every argument
(count, kind, ndim, dtype, device, each shape constraint, compactness) with TVM's messages,
binds symbolic shape variables, and calls the compute function. Parallel loops become OpenMP
``parallel for``; vector expressions (ramp / broadcast) use GCC vector extensions; unrolled
loops carry ``#pragma GCC unroll``. Calls out of the compiled code (``tvm_call_packed``,
``call_extern``, ``pragma_import_c``) are rendered by ``c_packed_call``; a buffer's
``access_ptr`` (``tvm_access_ptr``) is the address ``((float*)A + offset)``.
"""

from __future__ import annotations

import math
import re

from kiln.errors import ScheduleError
from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import rebuild
from kiln.tir.instrument_bound_checkers import CHECK_INDEX
from kiln.tir.op import EXTERN_CALL, PACKED_CALL, PURE_EXTERN_CALL, STACK_ARRAY, STACK_SHAPE

from .c_alloc import write_heap_allocate
from .c_bound_check import render_check_index
from .c_masked import masked_load, write_masked_store
from .c_narrow import carries_high_bits, is_narrow_int, needs_cut_before_cast
from .c_packed_call import IMPORT_C, extern_call_text, nested_call_error, write_packed_call
from .c_types import c_scalar, c_type, mask_dtype, vector_name, vector_typedef
from .import_llvm import IMPORT_LLVM, llvm_ir_to_c

_STACK_LIMIT_BYTES = 64 * 1024

#: intrinsics that are one C operator between their two arguments (shifts: ``e_Call``)
_BINARY_INTRINSICS = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}

#: the pragma of a parallel loop that forks only when its value holds at run time
#: (``s[T].pragma(axis, "parallel_if", condition)``; :meth:`CSourceWriter._parallel_if`)
PARALLEL_IF = "pragma_parallel_if"

#: OpenMP schedule of parallel loops. ``guided`` hands out chunks that start at 1/threads of
#: the loop and halve, so a core that lags (a busy neighbour on a VM) leaves its rest to the
#: others; a static split waits for it. On whole models it measured about even with static
#: (ResNet-18 0.96x, MobileNetV2 1.03x the time, 2 threads, interleaved in one process).
OMP_SCHEDULE = "guided"

_BIN = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.EQ: "==", E.NE: "!=", E.LT: "<", E.LE: "<=",
        E.GT: ">", E.GE: ">=", E.And: "&&", E.Or: "||"}

_MATH = {"exp", "exp2", "log", "log2", "log10", "sqrt", "tanh", "floor", "ceil", "round",
         "trunc", "erf", "sin", "cos", "fabs", "pow", "fmod"}


class _Names:
    """Unique, valid C identifiers for Vars."""

    def __init__(self):
        self.names: dict[E.Var, str] = {}
        self.used: set[str] = set()

    def get(self, v: E.Var) -> str:
        n = self.names.get(v)
        if n is None:
            base = re.sub(r"[^0-9a-zA-Z_]", "_", v.name) or "v"
            if base[0].isdigit():
                base = "v_" + base
            n, k = base, 0
            while n in self.used or n in _RESERVED:
                k += 1
                n = f"{base}_{k}"
            self.used.add(n)
            self.names[v] = n
        return n


_RESERVED = {"int", "float", "double", "char", "for", "if", "else", "while", "return", "args",
             "type_codes", "num_args", "default", "auto", "register", "static", "const",
             "void", "long", "short", "signed", "unsigned", "struct", "union", "case", "switch",
             "break", "continue", "goto", "do", "sizeof", "volatile", "extern", "inline",
             "restrict", "typedef", "enum"}


def _compared_dtype(c) -> str:
    """The dtype of the vectors that a lane condition compares (the first comparison's)."""
    if isinstance(c, E.And | E.Or):
        for x in (c.a, c.b):
            if dt.lanes(x.dtype) > 1 and not isinstance(x, E.Broadcast):
                return _compared_dtype(x)
    if isinstance(c, E.Not):
        return _compared_dtype(c.a)
    if isinstance(c, E.CmpOp):
        return c.a.dtype
    raise NotImplementedError(f"C codegen: lane condition {type(c).__name__}")


class CSourceWriter:
    """Emit C for the body of one function."""

    def __init__(self, names: _Names, typedefs: set[str], helpers: dict[str, str]):
        self.names = names
        self.typedefs = typedefs
        self.helpers = helpers
        self.lines: list[str] = []
        self.indent = 1
        self.in_parallel = 0
        # whether the function allocates on the heap (it then needs c_alloc's record)
        self.heap_allocates = False
        self.var_types: dict[E.Var, str] = {}
        self.tmp = 0
        # (mask variable, negated) while emitting a branch under a lane condition
        self.load_mask: tuple[str, bool] | None = None

    # ---- helpers ------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    def fresh(self, base: str) -> str:
        self.tmp += 1
        return f"_{base}{self.tmp}"

    def need_vector(self, dtype: str) -> str:
        self.typedefs.add(vector_typedef(dtype))
        self.typedefs.add(vector_typedef(dtype, aligned=False))
        return vector_name(dtype)

    def type_of(self, dtype: str) -> str:
        if dt.lanes(dtype) > 1:
            return self.need_vector(dtype)
        return c_type(dtype)

    # ---- expressions ----------------------------------------------------------------------
    def expr(self, e) -> str:
        m = getattr(self, "e_" + type(e).__name__, None)
        if m is None:
            for cls in type(e).__mro__:
                m = getattr(self, "e_" + cls.__name__, None)
                if m is not None:
                    break
        if m is None:
            raise NotImplementedError(f"C codegen: no rule for {type(e).__name__}")
        return m(e)

    def e_Var(self, e: E.Var) -> str:
        return self.names.get(e)

    def e_IntImm(self, e: E.IntImm) -> str:
        if e.dtype == "int32":
            return str(e.value) if e.value != -(2**31) else "(-2147483647-1)"
        if e.dtype == "bool":
            return "1" if e.value else "0"
        if e.dtype == "int64":
            return f"INT64_C({e.value})" if e.value != -(2**63) else "INT64_MIN"
        if e.dtype == "uint64":
            return f"UINT64_C({e.value})"
        return f"(({c_scalar(e.dtype)}){e.value})"

    def e_FloatImm(self, e: E.FloatImm) -> str:
        v = e.value
        if v != v:
            text = "NAN"
        elif v in (float("inf"), float("-inf")):
            text = "INFINITY" if v > 0 else "(-INFINITY)"
        else:
            text = repr(v)
            if "." not in text and "e" not in text:
                text += ".0"
            if e.dtype == "float32":
                text += "f"
        if e.dtype == "float16":
            return f"((_Float16){text}f)" if text[-1].isdigit() else f"((_Float16){text})"
        return text if e.dtype != "float32" or text[0] != "(" else f"((float){text})"

    def e_StringImm(self, e) -> str:
        return '"' + e.value.replace('"', '\\"') + '"'

    def e_Cast(self, e: E.Cast) -> str:
        if dt.lanes(e.dtype) > 1:
            value = self.expr(e.value)
            if dt.is_bool(e.dtype):
                # a lane is true where the value is not 0, as the scalar cast below (a
                # conversion would truncate 0.5 to 0); a comparison's true lanes are -1
                value = f"(-(({value}) != 0))"
            return f"__builtin_convertvector({value}, {self.need_vector(e.dtype)})"
        value = self.cast_operand(e)
        if dt.is_bool(e.dtype):
            return f"(({value}) != 0)"
        return f"(({c_scalar(e.dtype)})({value}))"

    def operand(self, e) -> str:
        """C of ``e`` as an operand whose high bits matter (a narrow integer cut back to its
        type where C's integer promotion may have left bits above it; :mod:`.c_narrow`)."""
        text = self.expr(e)
        return f"(({self.type_of(e.dtype)}){text})" if carries_high_bits(e) else text

    def cast_operand(self, e: E.Cast) -> str:
        """C of the value of the scalar cast ``e``, cut back to its narrow type where the cast
        reads its high bits (a widening, to a float or to bool)."""
        if needs_cut_before_cast(e.value.dtype, e.dtype):
            return self.operand(e.value)
        return self.expr(e.value)

    def widened_left(self, e) -> str:
        """C of ``e``, the left operand of a ``*`` or ``<<``: a narrow integer is cast to
        ``uint32`` (unsigned arithmetic wraps where ``int`` would overflow)."""
        if is_narrow_int(e.dtype):
            return f"({self.type_of('uint32')}){self.expr(e)}"
        return self.expr(e)

    def _binary(self, e, op: str) -> str:
        return f"({self.expr(e.a)} {op} {self.expr(e.b)})"

    def _binary_of_values(self, e, op: str) -> str:
        """``a op b`` where ``op`` reads the whole value of both operands (``/ % >> <``)."""
        return f"({self.operand(e.a)} {op} {self.operand(e.b)})"

    def e_Add(self, e):
        return self._binary(e, "+")

    def e_Sub(self, e):
        return self._binary(e, "-")

    def e_Mul(self, e):
        return f"({self.widened_left(e.a)} * {self.expr(e.b)})"

    def e_Div(self, e):
        return self._binary_of_values(e, "/")

    def e_Mod(self, e):
        return self._binary_of_values(e, "%")

    def e_CmpOp(self, e):
        return self._binary_of_values(e, _BIN[type(e)])

    def e_Not(self, e):
        return f"(!{self.expr(e.a)})"

    def e_FloorDiv(self, e):
        return self._int_helper("floordiv", e)

    def e_FloorMod(self, e):
        return self._int_helper("floormod", e)

    def _int_helper(self, name: str, e) -> str:
        if dt.lanes(e.dtype) > 1:
            raise NotImplementedError("vector floordiv/floormod")
        bits = 64 if dt.bits(e.dtype) > 32 else 32
        return f"kiln_{name}_i{bits}({self.operand(e.a)}, {self.operand(e.b)})"

    def e_Min(self, e):
        return self._minmax("min", "<", e)

    def e_Max(self, e):
        return self._minmax("max", ">", e)

    def _minmax(self, name: str, op: str, e) -> str:
        t = self.type_of(e.dtype)
        fn = f"kiln_{name}_{vector_name(e.dtype)}"
        if fn not in self.helpers:
            if dt.lanes(e.dtype) == 1:
                body = f"return a {op} b ? a : b;"
            else:
                # branch-free lane select: a lane loop with ?: would need if-conversion
                body = f"return {self._blend_text(e.dtype, f'a {op} b', 'a', 'b')};"
            self.helpers[fn] = f"static inline {t} {fn}({t} a, {t} b) {{ {body} }}"
        return f"{fn}({self.expr(e.a)}, {self.expr(e.b)})"

    def _blend_text(self, dtype: str, mask: str, a: str, b: str,
                    mask_type: str | None = None) -> str:
        """C for the lane-wise ``mask ? a : b`` of vectors of ``dtype``; ``mask`` is a GCC
        vector comparison (lanes all ones or all zeros, as signed integers; of type
        ``mask_type``, by default the width of ``dtype``). Evaluates ``a`` and ``b`` in
        full."""
        t = self.need_vector(dtype)
        it = self.need_vector(mask_dtype(dtype))
        if mask_type is not None and mask_type != it:
            mask = f"__builtin_convertvector({mask}, {it})"
        if it == t:
            return f"(({mask}) & ({a})) | (~({mask}) & ({b}))"
        return (f"({t})((({mask}) & ({it})({a})) | (~({mask}) & ({it})({b})))")

    def e_Select(self, e: E.Select) -> str:
        if dt.lanes(e.condition.dtype) > 1:
            m, mt = self._mask(e.condition)
            mv = self.fresh("m")
            blend = self._blend_text(e.dtype, mv, self.expr(e.true_value),
                                     self.expr(e.false_value), mt)
            return f"({{ {mt} {mv} = {m}; {blend}; }})"
        # a uniform condition chooses between two scalars or two whole vectors
        return (f"({self.expr(e.condition)} ? {self.expr(e.true_value)} : "
                f"{self.expr(e.false_value)})")

    # ---- lane masks (vector conditions) ---------------------------------------------------
    def _mask(self, c) -> tuple[str, str]:
        """C text and type of the lane mask of the vector condition ``c``: comparisons of
        vectors (one element width, as kiln.tir.vectorize checks), and/or/not, broadcast
        scalars. Each lane is all ones (true) or zeros."""
        mt = self.need_vector(mask_dtype(_compared_dtype(c)))
        return self._mask_text(c, mt), mt

    def _mask_text(self, c, mt: str) -> str:
        if isinstance(c, E.And | E.Or):
            op = "&" if isinstance(c, E.And) else "|"
            return f"({self._mask_text(c.a, mt)} {op} {self._mask_text(c.b, mt)})"
        if isinstance(c, E.Not):
            return f"(~{self._mask_text(c.a, mt)})"
        if isinstance(c, E.Broadcast):
            x = self.fresh("c")
            lanes = ", ".join([x] * c.lanes)
            return f"({{ int64_t {x} = -(int64_t)({self.expr(c.value)}); ({mt}){{{lanes}}}; }})"
        if isinstance(c, E.CmpOp):
            return self._binary(c, _BIN[type(c)])
        raise NotImplementedError(f"C codegen: lane condition {type(c).__name__}")

    def _lane_test_helper(self, mt: str, which: str) -> str:
        fn = f"kiln_{which}_{mt}"
        if fn not in self.helpers:
            # an and/or reduction without branches (no if-conversion needed to vectorize it)
            op, init, test = ("&", "-1", "r != 0") if which == "all" else ("|", "0", "r == 0")
            lanes = int(mt.rsplit("x", 1)[1])
            self.helpers[fn] = (f"static inline int {fn}({mt} m) {{ int64_t r = {init}; "
                                f"for (int k = 0; k < {lanes}; ++k) r {op}= m[k]; "
                                f"return {test}; }}")
        return fn

    def _masked_if_then_else(self, e: E.Call) -> str:
        """``if_then_else`` with a lane condition: when all lanes (or none) take the true
        branch only that branch is evaluated, in full; otherwise each branch reads memory
        only in the lanes that take it, and the results are blended."""
        c, a, b = e.args
        m, mt = self._mask(c)
        mv, rv = self.fresh("m"), self.fresh("r")
        t = self.need_vector(e.dtype)
        full_a, full_b = self.expr(a), self.expr(b)
        saved = self.load_mask
        try:
            self.load_mask = (mv, False)
            part_a = self.expr(a)
            self.load_mask = (mv, True)
            part_b = self.expr(b)
        finally:
            self.load_mask = saved
        blend = self._blend_text(e.dtype, mv, part_a, part_b, mt)
        all_fn = self._lane_test_helper(mt, "all")
        none_fn = self._lane_test_helper(mt, "none")
        return (f"({{ {mt} {mv} = {m}; {t} {rv}; if ({all_fn}({mv})) {rv} = {full_a}; "
                f"else if ({none_fn}({mv})) {rv} = {full_b}; else {rv} = {blend}; {rv}; }})")

    def e_Let(self, e: E.Let) -> str:
        name = self.names.get(e.var)
        return (f"({{ {self.type_of(e.var.dtype)} {name} = {self.expr(e.value)}; "
                f"{self.expr(e.body)}; }})")

    def e_Ramp(self, e: E.Ramp) -> str:
        t = self.need_vector(e.dtype)
        b = self.fresh("b")
        s = self.fresh("s")
        st = c_scalar(e.base.dtype)
        lanes = ", ".join(f"{b} + {k}*{s}" for k in range(e.lanes))
        return (f"({{ {st} {b} = {self.expr(e.base)}; {st} {s} = {self.expr(e.stride)}; "
                f"({t}){{{lanes}}}; }})")

    def e_Broadcast(self, e: E.Broadcast) -> str:
        t = self.need_vector(e.dtype)
        if isinstance(e.value, E.IntImm | E.FloatImm | E.Var):
            v = self.expr(e.value)
            return f"(({t}){{{', '.join([v] * e.lanes)}}})"
        x = self.fresh("x")
        return (f"({{ {c_scalar(e.value.dtype)} {x} = {self.expr(e.value)}; "
                f"({t}){{{', '.join([x] * e.lanes)}}}; }})")

    def e_Load(self, e: E.Load) -> str:
        buf = self.names.get(e.buffer_var)
        if dt.lanes(e.dtype) == 1:
            return f"{buf}[{self.expr(e.index)}]"
        idx = e.index
        if e.predicate is not None:
            return masked_load(self, e, buf)
        if self.load_mask is not None:
            return self._masked_gather(e, buf)
        if isinstance(idx, E.Ramp) and isinstance(idx.stride, E.IntImm) and idx.stride.value == 1:
            self.need_vector(e.dtype)
            return f"(*({vector_name(e.dtype)}_u*)({buf} + {self.expr(idx.base)}))"
        return self._gather(e, buf)

    def _masked_gather(self, e: E.Load, buf: str) -> str:
        """Read only the lanes the current lane mask selects (zero elsewhere)."""
        t = self.need_vector(e.dtype)
        it = self.need_vector(e.index.dtype)
        ix = self.fresh("ix")
        mv, negate = self.load_mask
        zero = f"({c_scalar(e.dtype)})0"
        lanes = ", ".join(f"({'!' if negate else ''}{mv}[{k}] ? {buf}[{ix}[{k}]] : {zero})"
                          for k in range(dt.lanes(e.dtype)))
        return f"({{ {it} {ix} = {self.expr(e.index)}; ({t}){{{lanes}}}; }})"

    def _gather(self, e: E.Load, buf: str) -> str:
        t = self.need_vector(e.dtype)
        it = self.need_vector(e.index.dtype)
        ix = self.fresh("ix")
        lanes = ", ".join(f"{buf}[{ix}[{k}]]" for k in range(dt.lanes(e.dtype)))
        return f"({{ {it} {ix} = {self.expr(e.index)}; ({t}){{{lanes}}}; }})"

    def e_ProducerLoad(self, e):
        raise NotImplementedError("C codegen met a ProducerLoad: storage_flatten did not run")

    def e_Call(self, e: E.Call) -> str:
        op, args = e.op, e.args
        if op in (EXTERN_CALL, PURE_EXTERN_CALL):
            return extern_call_text(self, e)
        if op in (PACKED_CALL, STACK_ARRAY, STACK_SHAPE):
            raise nested_call_error(e)
        if op == CHECK_INDEX:
            return render_check_index(e, self)
        if op == S.ACCESS_PTR:
            return self._access_ptr(e)
        if op == "tvm_if_then_else" and dt.lanes(args[0].dtype) > 1:
            return self._masked_if_then_else(e)
        if op == "reinterpret":
            return self._reinterpret(args[0].dtype, e.dtype, self.expr(args[0]))
        if dt.lanes(e.dtype) > 1 and op not in ("likely", "tvm_if_then_else"):
            raise NotImplementedError(f"vector call {op}")
        if op == "tvm_if_then_else":
            c, a, b = (self.expr(x) for x in args)
            return f"({c} ? {a} : {b})"
        if op == "likely":
            return f"__builtin_expect(!!({self.expr(args[0])}), 1)"
        if op == "tvm_address_of":
            return f"(&({self.expr(args[0])}))"
        if op == "prefetch":  # (address, rw, locality, cache type): GCC takes the first three
            return f"__builtin_prefetch({', '.join(self.expr(a) for a in args[:3])})"
        if op == "sigmoid":
            x = self.expr(args[0])
            one = "1.0f" if e.dtype == "float32" else "1.0"
            return f"({one} / ({one} + {self._math('exp', e.dtype, [f'-({x})'])}))"
        if op == "rsqrt":
            one = "1.0f" if e.dtype == "float32" else "1.0"
            return f"({one} / {self._math('sqrt', e.dtype, [self.expr(args[0])])})"
        if op == "isnan":
            x = self.expr(args[0])
            return f"({x} != {x})"
        if op == "shift_left":
            return f"({self.widened_left(args[0])} << {self.operand(args[1])})"
        if op == "shift_right":
            return f"({self.operand(args[0])} >> {self.operand(args[1])})"
        if op in _BINARY_INTRINSICS:
            return f"({self.expr(args[0])} {_BINARY_INTRINSICS[op]} {self.expr(args[1])})"
        if op == "bitwise_not":
            return f"(~{self.expr(args[0])})"
        if op in _MATH:
            return self._math(op, e.dtype, [self.expr(a) for a in args])
        raise NotImplementedError(f"C codegen: intrinsic '{op}' is not supported")

    def _reinterpret(self, src: str, dst: str, x: str) -> str:
        """``tir.reinterpret``: a vector cast (GCC's vector extensions cast bits), or for a
        scalar a copy of the bits, which the C compiler turns into a register move."""
        if dt.lanes(dst) > 1:
            return f"(({self.need_vector(dst)})({x}))"
        return (f"({{ {c_type(src)} kiln_bits_ = {x}; {c_type(dst)} kiln_as_; "
                f"__builtin_memcpy(&kiln_as_, &kiln_bits_, sizeof(kiln_as_)); kiln_as_; }})")

    def _access_ptr(self, e: E.Call) -> str:
        """``tvm_access_ptr(type_annotation(), data, offset, extent, mask)`` (a buffer's
        ``access_ptr``): the address of element ``offset``, ``((float*)A + offset)``."""
        annotation, data, offset = e.args[:3]
        return f"(({self.type_of(annotation.dtype)}*){self.expr(data)} + {self.expr(offset)})"

    def _math(self, op: str, dtype: str, args: list[str]) -> str:
        if dtype == "float64":
            return f"{op}({', '.join(args)})"
        if dtype == "float32":
            return f"{op}f({', '.join(args)})"
        if dtype == "float16":
            inner = ", ".join(f"(float)({a})" for a in args)
            return f"((_Float16){op}f({inner}))"
        raise NotImplementedError(f"math function {op} on {dtype}")

    # ---- statements -----------------------------------------------------------------------
    def stmt(self, s) -> None:
        m = getattr(self, "s_" + type(s).__name__, None)
        if m is None:
            raise NotImplementedError(f"C codegen: no rule for statement {type(s).__name__}")
        m(s)

    def s_SeqStmt(self, s):
        for x in s.seq:
            self.stmt(x)

    def s_Evaluate(self, s):
        if isinstance(s.value, E.IntImm):
            return
        if isinstance(s.value, E.Call) and s.value.op == PACKED_CALL:
            write_packed_call(self, s.value)
            return
        self.emit(f"(void)({self.expr(s.value)});")

    def s_LetStmt(self, s):
        self.emit(f"{self.type_of(s.var.dtype)} {self.names.get(s.var)} = {self.expr(s.value)};")
        self.stmt(s.body)

    def s_AssertStmt(self, s):
        msg = s.message.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
        self.emit(f"if (!({self.expr(s.condition)})) {{ kiln_set_error(\"{msg}\"); "
                  f"return -1; }}")
        self.stmt(s.body)

    def s_IfThenElse(self, s):
        self.emit(f"if ({self.expr(s.condition)}) {{")
        self._nested(s.then_case)
        if s.else_case is not None:
            self.emit("} else {")
            self._nested(s.else_case)
        self.emit("}")

    def _nested(self, body) -> None:
        self.indent += 1
        self.stmt(body)
        self.indent -= 1

    def s_For(self, s: S.For):
        v = self.names.get(s.loop_var)
        ext = self.expr(s.extent)
        lo = self.expr(s.min)
        end = ext if lo == "0" else f"{lo} + {ext}"
        parallel = s.kind == S.ForKind.PARALLEL and self.in_parallel == 0
        if parallel:
            self.emit(f"#pragma omp parallel for schedule({OMP_SCHEDULE})")
        elif s.kind == S.ForKind.UNROLLED and isinstance(s.extent, E.IntImm):
            self.emit(f"#pragma GCC unroll {max(1, min(s.extent.value, 65535))}")
        elif s.kind == S.ForKind.VECTORIZED:
            self.emit("#pragma GCC ivdep")
        self.emit(f"for ({c_scalar(s.loop_var.dtype)} {v} = {lo}; {v} < {end}; ++{v}) {{")
        self.in_parallel += parallel
        self._nested(s.body)
        self.in_parallel -= parallel
        self.emit("}")

    def s_AttrStmt(self, s: S.AttrStmt):
        if s.attr_key == "thread_extent":
            tag = getattr(s.node, "thread_tag", "?")
            raise ScheduleError(
                f"an axis is bound to GPU thread '{tag}' but the target is a CPU (llvm/c); "
                f"bind is for target 'cuda' — use parallel/vectorize on a CPU")
        if s.attr_key == IMPORT_C:  # C source pasted before the functions, once
            self.helpers.setdefault(s.value.value, s.value.value)
        elif s.attr_key == IMPORT_LLVM:  # LLVM IR, compiled to assembly and pasted once
            if s.value.value not in self.helpers:
                self.helpers[s.value.value] = llvm_ir_to_c(s.value.value)
        elif s.attr_key == PARALLEL_IF and self._forks(s.body):
            self._parallel_if(s.value, s.body)
            return
        self.stmt(s.body)

    def _forks(self, s: S.Stmt) -> bool:
        """Whether ``s`` is a loop that becomes an OpenMP ``parallel for``."""
        return isinstance(s, S.For) and s.kind == S.ForKind.PARALLEL and self.in_parallel == 0

    def _parallel_if(self, condition: E.PrimExpr, loop: S.For) -> None:
        """``pragma_parallel_if``: the parallel ``loop`` forks the threads only when
        ``condition`` holds at run time, else it runs in the calling thread. A plain C ``if``
        around two copies of the loop: OpenMP's ``if`` clause still enters the runtime
        (about a microsecond per region, even on one thread)."""
        self.emit(f"if ({self.expr(condition)}) {{")
        self._nested(loop)
        self.emit("} else {")
        self._nested(rebuild(loop, kind=S.ForKind.SERIAL))
        self.emit("}")

    def s_Store(self, s: S.Store):
        buf = self.names.get(s.buffer_var)
        value = self.expr(s.value)
        lanes = dt.lanes(s.value.dtype)
        if lanes == 1:
            self.emit(f"{buf}[{self.expr(s.index)}] = {value};")
            return
        idx = s.index
        if s.predicate is not None:
            write_masked_store(self, s, buf, value)
            return
        name = vector_name(s.value.dtype)
        self.need_vector(s.value.dtype)
        if isinstance(idx, E.Ramp) and isinstance(idx.stride, E.IntImm) and idx.stride.value == 1:
            self.emit(f"*({name}_u*)({buf} + {self.expr(idx.base)}) = {value};")
            return
        it = self.need_vector(idx.dtype)
        ix, vx = self.fresh("ix"), self.fresh("vx")
        self.emit(f"{{ {it} {ix} = {self.expr(idx)}; {name} {vx} = {value};")
        for k in range(lanes):
            self.emit(f"  {buf}[{ix}[{k}]] = {vx}[{k}];")
        self.emit("}")

    def s_Allocate(self, s: S.Allocate):
        # each allocation gets its own C block: loop partitioning can place two copies of the
        # same allocation side by side
        self.emit("{")
        self.indent += 1
        self._allocate(s)
        self.indent -= 1
        self.emit("}")

    def _allocate(self, s: S.Allocate):
        itemsize = dt.itemsize(dt.element_of(s.dtype))
        constant = all(isinstance(x, E.IntImm) for x in s.extents)
        if constant:
            count = math.prod(x.value for x in s.extents)
            if count * itemsize <= _STACK_LIMIT_BYTES:
                name, ct = self.names.get(s.buffer_var), c_scalar(s.dtype)
                self.emit(f"{ct} {name}[{max(1, count)}] __attribute__((aligned(64)));")
                self.stmt(s.body)
                return
        # the element count in int64: a product of int32 extents may overflow int32
        count_text = " * ".join(f"(int64_t)({self.expr(x)})" for x in s.extents)
        write_heap_allocate(self, s, count_text, itemsize, small=not constant)
