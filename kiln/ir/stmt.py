"""Statement nodes of kiln's loop IR, plus Buffer, PrimFunc and IRModule.

Before storage flattening a program reads and writes tensors (``ProducerStore`` /
``ProducerLoad`` inside ``ProducerRealize``); afterwards it reads and writes flat buffers
(``Store`` / ``Load`` inside ``Allocate``).
"""

from __future__ import annotations

from enum import Enum

from . import dtype as dt
from .expr import Call, IntImm, Load, Node, PrimExpr, Ramp, Var
from .op import convert


class Stmt(Node):
    __slots__ = ()


class ForKind(Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


class For(Stmt):
    """``for (loop_var, min, extent) body`` of a given kind."""

    __slots__ = ("loop_var", "min", "extent", "kind", "body", "thread_tag", "annotations")
    _fields = ("loop_var", "min", "extent", "kind", "body", "thread_tag", "annotations")

    def __init__(self, loop_var: Var, min, extent, kind: ForKind, body: Stmt,
                 thread_tag: str = "", annotations: tuple = ()):
        self._init(loop_var=loop_var, min=convert(min), extent=convert(extent), kind=kind,
                   body=body, thread_tag=thread_tag, annotations=tuple(annotations))


class LetStmt(Stmt):
    __slots__ = ("var", "value", "body")
    _fields = ("var", "value", "body")

    def __init__(self, var: Var, value: PrimExpr, body: Stmt):
        self._init(var=var, value=value, body=body)


class AttrStmt(Stmt):
    """An annotation on ``body``: thread extents, pragmas, storage scopes, produce markers."""

    __slots__ = ("node", "attr_key", "value", "body")
    _fields = ("node", "attr_key", "value", "body")

    def __init__(self, node, attr_key: str, value, body: Stmt):
        self._init(node=node, attr_key=attr_key, value=convert(value), body=body)


class AssertStmt(Stmt):
    __slots__ = ("condition", "message", "body")
    _fields = ("condition", "message", "body")

    def __init__(self, condition: PrimExpr, message: str, body: Stmt):
        self._init(condition=condition, message=message, body=body)


class ProducerStore(Stmt):
    """``producer[indices] = value`` on a tensor (TVM's Provide)."""

    __slots__ = ("producer", "value", "indices")
    _fields = ("producer", "value", "indices")

    def __init__(self, producer, value: PrimExpr, indices):
        self._init(producer=producer, value=value, indices=tuple(indices))


class ProducerRealize(Stmt):
    """Make storage for ``producer`` over ``bounds`` (a Range per dimension) within ``body``."""

    __slots__ = ("producer", "bounds", "condition", "body", "scope", "align")
    _fields = ("producer", "bounds", "condition", "body", "scope", "align")

    def __init__(self, producer, bounds, condition, body: Stmt, scope: str = "",
                 align: tuple = ()):
        """``align``: (dim, factor, offset) triples from ``storage_align``."""
        self._init(producer=producer, bounds=tuple(bounds), condition=condition, body=body,
                   scope=scope, align=tuple(align))


class Store(Stmt):
    """``buffer_var[index] = value`` on a flat buffer (index may be a Ramp)."""

    __slots__ = ("buffer_var", "value", "index", "predicate")
    _fields = ("buffer_var", "value", "index", "predicate")

    def __init__(self, buffer_var: Var, value: PrimExpr, index: PrimExpr, predicate=None):
        self._init(buffer_var=buffer_var, value=value, index=index, predicate=predicate)


class Allocate(Stmt):
    """Allocate ``prod(extents)`` elements of ``dtype`` named by ``buffer_var`` for ``body``."""

    __slots__ = ("buffer_var", "dtype", "extents", "condition", "body", "scope")
    _fields = ("buffer_var", "dtype", "extents", "condition", "body", "scope")

    def __init__(self, buffer_var: Var, dtype: str, extents, condition, body: Stmt,
                 scope: str = "global"):
        self._init(buffer_var=buffer_var, dtype=dt.normalize(dtype),
                   extents=tuple(convert(e) for e in extents), condition=condition, body=body,
                   scope=scope)


class IfThenElse(Stmt):
    __slots__ = ("condition", "then_case", "else_case")
    _fields = ("condition", "then_case", "else_case")

    def __init__(self, condition: PrimExpr, then_case: Stmt, else_case: Stmt | None = None):
        self._init(condition=condition, then_case=then_case, else_case=else_case)


class SeqStmt(Stmt):
    __slots__ = ("seq",)
    _fields = ("seq",)

    def __init__(self, seq):
        self._init(seq=tuple(seq))


class Evaluate(Stmt):
    __slots__ = ("value",)
    _fields = ("value",)

    def __init__(self, value):
        self._init(value=convert(value))


def seq(*stmts: Stmt | None) -> Stmt:
    """Sequence statements, flattening nested SeqStmts and dropping Nones and no-ops."""
    out: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            out.extend(s.seq)
        elif is_no_op(s):
            continue
        else:
            out.append(s)
    if not out:
        return Evaluate(0)
    return out[0] if len(out) == 1 else SeqStmt(out)


def is_no_op(s: Stmt) -> bool:
    from .expr import IntImm

    return isinstance(s, Evaluate) and isinstance(s.value, IntImm)


def stmt_seq(*args) -> Stmt:
    """``tvm.tir.stmt_seq``: the arguments in order as one statement (an expression becomes
    ``Evaluate``); a single statement is returned as it is. Unlike ``seq``, nothing is
    flattened or dropped."""
    stmts = [a if isinstance(a, Stmt) else Evaluate(a) for a in args]
    return stmts[0] if len(stmts) == 1 else SeqStmt(stmts)


def stmt_list(stmt: Stmt) -> list[Stmt]:
    """``tvm.tir.stmt_list``: the statements of ``stmt``, nested ``SeqStmt`` flattened."""
    if isinstance(stmt, SeqStmt):
        return [s for part in stmt.seq for s in stmt_list(part)]
    return [stmt]


#: ``data_alignment`` of a buffer that does not say (TVM's ``runtime::kAllocAlignment``)
DEFAULT_ALIGNMENT = 64


class Buffer(Node):
    """A region of memory (TVM's ``tir.Buffer``): the data pointer var, element dtype, shape,
    strides (empty: dense row-major), ``elem_offset`` (where element 0 starts, in elements
    from ``data``; None: at ``data``), name and scope.

    ``data_alignment`` (bytes) and ``offset_factor`` (``elem_offset`` is a multiple of it)
    are what the buffer promises about its start; ``buffer_type`` ``"auto_broadcast"`` gives
    a dimension of extent 1 the stride 0. As a function argument the buffer's symbolic
    strides and ``elem_offset`` are bound from the array passed (codegen/arg_checks.py).
    """

    __slots__ = ("data", "dtype", "shape", "strides", "elem_offset", "name", "scope",
                 "data_alignment", "offset_factor", "buffer_type")
    _fields = ("data", "dtype", "shape", "strides", "elem_offset", "name", "scope",
               "data_alignment", "offset_factor", "buffer_type")

    def __init__(self, data: Var, dtype: str, shape, name: str, strides=(), elem_offset=None,
                 scope: str = "global", data_alignment: int = DEFAULT_ALIGNMENT,
                 offset_factor: int = 1, buffer_type: str = ""):
        self._init(data=data, dtype=dt.normalize(dtype), shape=tuple(convert(s) for s in shape),
                   strides=tuple(convert(s) for s in strides),
                   elem_offset=None if elem_offset is None else convert(elem_offset), name=name,
                   scope=scope, data_alignment=data_alignment, offset_factor=offset_factor,
                   buffer_type=buffer_type)

    def dense_strides(self) -> list[PrimExpr]:
        """The strides, in elements: the declared ones, else row-major of the shape."""
        if self.strides:
            return list(self.strides)
        out: list[PrimExpr] = []
        acc: PrimExpr = convert(1)
        for extent in reversed(self.shape):
            out.append(acc)
            acc = acc * extent
        return list(reversed(out))

    def symbolic_vars(self) -> list[Var]:
        """The variables of the shape, strides and ``elem_offset``, in that order, each once:
        the values an argument array gives (its dimensions, strides and offset)."""
        from .functor import collect_vars  # functor imports this module

        out: list[Var] = []
        offset = () if self.elem_offset is None else (self.elem_offset,)
        for e in (*self.shape, *self.strides, *offset):
            out.extend(v for v in collect_vars(e) if v not in out)
        return out

    # ---- element access (TVM's Buffer.access_ptr / vload / vstore / offset_of) -------------
    #: bits of an ``access_ptr`` mask
    READ = 1
    WRITE = 2

    def offset_of(self, indices) -> PrimExpr:
        """The element offset of ``indices`` from ``data``: ``elem_offset + sum(index *
        stride)`` with the declared strides, else row-major over the shape (TVM's
        ``Buffer.offset_of``, one expression as in TVM 0.8)."""
        indices = [convert(i) for i in (indices if isinstance(indices, list | tuple)
                                        else [indices])]
        if len(indices) != max(len(self.shape), 1):
            raise ValueError(f"buffer {self.name}: {len(indices)} indices for a "
                             f"{len(self.shape)}-d buffer")
        if self.strides:
            flat: PrimExpr | None = None
            for index, stride in zip(indices, self.strides, strict=True):
                flat = index * stride if flat is None else flat + index * stride
        else:
            flat = indices[0]
            for index, extent in zip(indices[1:], self.shape[1:], strict=True):
                flat = flat * extent + index
        return flat if self.elem_offset is None else self.elem_offset + flat

    def vload(self, begin, dtype: str | None = None) -> PrimExpr:
        """Load ``dtype`` (the buffer's dtype, or a vector of it) starting at index ``begin``:
        ``data[offset_of(begin)]``, a ``ramp`` of consecutive elements for a vector."""
        dtype = dt.normalize(dtype or self.dtype)
        self._check_element(dtype, "vload")
        return Load(dtype, self.data, self._vector_index(begin, dtype))

    def vstore(self, begin, value) -> Stmt:
        """Store ``value`` (a scalar or a vector of the buffer's dtype) from index ``begin``."""
        value = convert(value)
        self._check_element(value.dtype, "vstore")
        return Store(self.data, value, self._vector_index(begin, value.dtype))

    def access_ptr(self, access_mask, ptr_type: str = "handle", content_lanes: int = 1,
                   offset=0, extent=None) -> PrimExpr:
        """A pointer to the buffer's memory from element ``offset`` for a call out of the
        generated code: ``tvm_access_ptr(type_annotation(), data, elem_offset + offset,
        extent, mask)``, as in TVM. ``access_mask`` is ``"r"``, ``"w"``, ``"rw"`` or the bits
        ``Buffer.READ | Buffer.WRITE``; ``extent`` (elements) defaults to the rest of the
        buffer; ``content_lanes`` counts offset and extent in vectors of that many lanes."""
        mask = _access_mask(access_mask, self.name)
        offset = convert(offset)
        if extent is None:
            size = self.strides[0] * self.shape[0] if self.strides and self.shape else \
                _product(self.shape)
            extent = size - offset
        start = offset if self.elem_offset is None else self.elem_offset + offset
        element = self.dtype
        if content_lanes > 1:
            element = dt.with_lanes(self.dtype, content_lanes)
            start, extent = start // content_lanes, convert(extent) // content_lanes
        annotation = Call(element, TYPE_ANNOTATION, [])
        return Call(dt.normalize(ptr_type), ACCESS_PTR,
                    [annotation, self.data, start, convert(extent), IntImm("int32", mask)])

    def _check_element(self, dtype: str, what: str) -> None:
        if dt.element_of(dtype) != dt.element_of(self.dtype):
            raise TypeError(f"buffer {self.name}: cannot {what} {dtype} from a buffer of "
                            f"{self.dtype}")

    def _vector_index(self, begin, dtype: str) -> PrimExpr:
        index = self.offset_of(begin)
        lanes = dt.lanes(dtype)
        return index if lanes == 1 else Ramp(index, IntImm(index.dtype, 1), lanes)


#: ``tvm_access_ptr(type_annotation(), data, offset, extent, mask)``: a buffer's address
ACCESS_PTR = "tvm_access_ptr"
#: ``type_annotation()`` of dtype T: the element type an ``ACCESS_PTR`` points to
TYPE_ANNOTATION = "type_annotation"


def _access_mask(mask, name: str) -> int:
    """``"r"``/``"w"``/``"rw"`` (or the int bits) as ``Buffer.READ | Buffer.WRITE``."""
    if isinstance(mask, int):
        return mask
    bits = 0
    for c in str(mask):
        if c not in "rw":
            raise ValueError(f"buffer {name}: access_ptr mask must be made of 'r' and 'w', "
                             f"got {mask!r}")
        bits |= Buffer.READ if c == "r" else Buffer.WRITE
    return bits


def _product(values) -> PrimExpr:
    out: PrimExpr = convert(1)
    for v in values:
        out = out * v
    return out


def decl_buffer(shape, dtype: str = "float32", name: str = "buffer", data: Var | None = None,
                strides=None, elem_offset=None, scope: str = "", data_alignment: int = -1,
                offset_factor: int = 0, buffer_type: str = "", axis_separators=None,
                span=None) -> Buffer:
    """``tvm.tir.decl_buffer``: a buffer over ``data`` (a fresh pointer variable named
    ``name`` by default). As in TVM, ``offset_factor`` without ``elem_offset`` makes the
    offset a variable ``<name>_elem_offset`` (bound from the array's ``byte_offset``), and
    ``buffer_type="auto_broadcast"`` without ``strides`` makes every stride a variable
    ``<name>_stride<i>`` (0 where the array's dimension is 1). ``span`` (source location) is
    accepted for TVM's signature and ignored."""
    if axis_separators:
        raise NotImplementedError(
            f"decl_buffer({name!r}): axis_separators (buffers flattened to several physical "
            f"axes) are not supported; kiln flattens every buffer to one dimension")
    if buffer_type not in ("", "default", "auto_broadcast"):
        raise ValueError(f"decl_buffer({name!r}): buffer_type must be '' or 'auto_broadcast', "
                         f"got {buffer_type!r}")
    shape = tuple(shape) if isinstance(shape, list | tuple) else (shape,)
    index_type = "int32"
    if offset_factor != 0 and elem_offset is None:
        elem_offset = Var(f"{name}_elem_offset", index_type)
    if buffer_type == "auto_broadcast" and strides is None and shape:
        strides = [Var(f"{name}_stride{i}", index_type) for i in range(len(shape))]
    return Buffer(Var(name, "handle") if data is None else data, dtype, shape, name,
                  strides=strides or (), elem_offset=elem_offset, scope=scope or "global",
                  data_alignment=data_alignment if data_alignment > 0 else DEFAULT_ALIGNMENT,
                  offset_factor=max(offset_factor, 1),
                  buffer_type="auto_broadcast" if buffer_type == "auto_broadcast" else "")


class PrimFunc(Node):
    """A lowered function: parameters (Vars), the buffers behind pointer params, and a body."""

    __slots__ = ("params", "buffer_map", "body", "name", "attrs")
    _fields = ("params", "buffer_map", "body", "name", "attrs")

    def __init__(self, params, buffer_map: dict, body: Stmt, name: str = "main",
                 attrs: dict | None = None):
        self._init(params=tuple(params), buffer_map=dict(buffer_map), body=body, name=name,
                   attrs=dict(attrs or {}))

    def with_body(self, body: Stmt) -> PrimFunc:
        return PrimFunc(self.params, self.buffer_map, body, self.name, self.attrs)


class IRModule:
    """A named collection of PrimFuncs (what ``kiln.lower`` returns)."""

    def __init__(self, functions: dict[str, PrimFunc] | None = None):
        self.functions: dict[str, PrimFunc] = dict(functions or {})

    @staticmethod
    def from_expr(func: PrimFunc) -> IRModule:
        """A module holding ``func`` as ``"main"`` (TVM's ``IRModule.from_expr``)."""
        return IRModule({"main": func})

    def __getitem__(self, name: str) -> PrimFunc:
        return self.functions[name]

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def items(self):
        return self.functions.items()

    def __repr__(self) -> str:
        from .printer import to_text

        return "\n".join(to_text(f) for f in self.functions.values())

    __str__ = __repr__

    def astext(self) -> str:
        return repr(self)

    def script(self) -> str:
        return repr(self)

    def show(self) -> None:
        print(self)
