"""Storage flattening: multi-dimensional tensor accesses become flat buffer accesses.

Guarantees: after this pass no ``ProducerRealize``, ``ProducerStore`` or ``ProducerLoad``
remains. Argument tensors are accessed through their function buffers: with dense row-major
strides (``a[((i*m) + j)]``), or with the strides and ``elem_offset`` of a buffer given in
``binds`` (``tir.decl_buffer((n, m), strides=[s, 1], elem_offset=off)``:
``a[((off + (i*s)) + j)]``); every other realized tensor gets an ``Allocate`` of the region
bound inference gave it (extents widened to a constant upper bound where the analyzer can find
one, so an allocation inside a loop has a fixed size), indexed relative to the region's start.
As in TVM, a buffer whose size does not fit in int32 (``index_dtype`` of its shape) is indexed
in int64 even where its indices are int32: ``a[((int64(i)*70000) + int64(j))]``. A
``buffer_bind_scope`` attribute (a ``te.extern`` placeholder bound to a whole tensor, a
tensor intrinsic's buffer bound to a region by ``tensorize``) is resolved: the buffer's data
pointer becomes the tensor's storage, and its symbolic shape, strides and ``elem_offset``
the region's (substituted; constant ones must match).
"""

from __future__ import annotations

from kiln.arith import Analyzer
from kiln.errors import TVMError
from kiln.ir.expr import IntImm, Load, PrimExpr, Var
from kiln.ir.functor import Mutator, substitute
from kiln.ir.op import convert, floordiv, index_dtype, widen
from kiln.ir.stmt import Allocate, AttrStmt, Buffer, For, Store

#: the attribute binding a declared buffer to a tensor's storage (``te.extern``'s body)
BUFFER_BIND_SCOPE = "buffer_bind_scope"


class _Entry:
    """How a tensor's accesses flatten: ``offset + sum((index - min) * stride)`` into
    ``data`` (``offset`` None: no offset term)."""

    def __init__(self, data: Var, dtype: str, mins: list[PrimExpr], strides: list[PrimExpr],
                 name: str, index_type: str, offset: PrimExpr | None = None):
        self.data = data
        self.dtype = dtype
        self.mins = mins
        self.strides = strides
        self.name = name
        self.index_type = index_type
        self.offset = offset

    def flat_index(self, indices) -> PrimExpr:
        acc: PrimExpr | None = (None if self.offset is None
                                else widen(self.offset, self.index_type))
        for idx, lo, stride in zip(indices, self.mins, self.strides, strict=True):
            term = idx - lo if not (isinstance(lo, IntImm) and lo.value == 0) else idx
            term = widen(term, self.index_type) * widen(stride, self.index_type)
            acc = term if acc is None else acc + term
        return acc if acc is not None else IntImm(self.index_type, 0)


class _Flattener(Mutator):
    def __init__(self, buffers: dict, analyzer: Analyzer):
        super().__init__()
        self.entries: dict = {}
        self.analyzer = analyzer
        for tensor, buf in buffers.items():
            self.entries[tensor] = _Entry(buf.data, buf.dtype, [convert(0)] * len(buf.shape),
                                          buf.dense_strides(), buf.name, index_dtype(*buf.shape),
                                          _offset(buf))

    def _entry(self, tensor):
        e = self.entries.get(tensor)
        if e is None:
            raise TVMError(
                f"tensor '{tensor.name}' is read but is neither computed in this schedule nor "
                f"passed in the argument list; add it to the arguments of lower/build")
        return e

    def visit_For(self, node: For):
        self.analyzer.bind(node.loop_var, _range(node.min, node.extent))
        return self.generic_visit(node)

    def visit_AttrStmt(self, node: AttrStmt):
        if node.attr_key == "thread_extent":
            self.analyzer.bind(node.node.var, _range(IntImm("int32", 0), node.value))
        if node.attr_key == BUFFER_BIND_SCOPE:
            buf, tensor = node.node
            bounds = node.value.args
            region = [(bounds[k], bounds[k + 1]) for k in range(0, len(bounds), 2)]
            return self._bind_buffer(buf, tensor, region, node.body)
        return self.generic_visit(node)

    def _bind_buffer(self, buf: Buffer, tensor, region: list[tuple[PrimExpr, PrimExpr]],
                     body):
        """``body`` with the declared buffer ``buf`` standing for the ``region`` ((min,
        extent) per dimension) of ``tensor``'s storage: its data pointer replaced by the
        tensor's, its shape, strides and element offset by the region's (symbolic ones
        substituted, constant ones checked). Leading dimensions of the region beyond the
        buffer's must have extent 1 (a ``[1, n]`` region binds an ``[n]`` buffer)."""
        e = self._entry(tensor)
        where = f"buffer '{buf.name}' bound to tensor '{tensor.name}'"
        lead = len(region) - len(buf.shape)
        if buf.dtype != e.dtype or lead < 0 or not all(
                self.analyzer.can_prove(extent == 1) for _, extent in region[:lead]):
            raise TVMError(f"{where}: the {buf.dtype} buffer of shape {list(buf.shape)} does "
                           f"not fit the {e.dtype} region of extents "
                           f"{[extent for _, extent in region]}")
        values: dict[Var, PrimExpr] = {}
        checks = list(zip(buf.shape, [extent for _, extent in region[lead:]], strict=True))
        checks += zip(buf.dense_strides(), e.strides[lead:], strict=True)
        offset = self.analyzer.simplify(e.flat_index([lo for lo, _ in region]))
        declared = _offset(buf)
        checks.append((IntImm(offset.dtype, 0) if declared is None else declared, offset))
        for want, have in checks:
            if isinstance(want, Var) and want not in values:
                values[want] = have
            elif not self.analyzer.can_prove(convert(want).equal(have)):
                raise TVMError(
                    f"{where}: the buffer declares {want} where the tensor's region has "
                    f"{self.analyzer.simplify(have)} (shape, strides or element offset); "
                    f"declare the buffer with symbolic strides (strides=[te.var(), 1]) and "
                    f"an element offset (offset_factor=1) to bind it to any region")
        factor = buf.offset_factor
        if factor > 1 and isinstance(buf.elem_offset, Var) and \
                self.analyzer.can_prove(offset % factor != 0):
            raise TVMError(f"{where}: the region starts at element offset {offset}, not a "
                           f"multiple of the buffer's offset_factor {factor}")
        values[buf.data] = e.data
        return substitute(self.visit(body), values)

    def visit_ProducerRealize(self, node):
        t = node.producer
        extents = [self._const_upper(r.extent) for r in node.bounds]
        index_type = index_dtype(*extents)
        align = {d: (f, o) for d, f, o in node.align}
        strides: list[PrimExpr] = []
        acc: PrimExpr = convert(1)
        for d in reversed(range(len(extents))):
            if d in align:  # storage_align: stride = factor*k + offset
                f, o = align[d]
                acc = floordiv(acc + (f - o) - 1 + f, f) * f + o - f
            strides.append(acc)
            acc = widen(acc, index_type) * extents[d]
        strides.reverse()
        data = Var(t.name, "handle")
        self.entries[t] = _Entry(data, t.dtype, [r.min for r in node.bounds], strides, t.name,
                                 index_type)
        body = self.visit(node.body)
        size = [self.analyzer.simplify(acc)] if extents else [convert(1)]
        return Allocate(data, t.dtype, size, IntImm("bool", 1), body, scope=node.scope)

    def _const_upper(self, extent: PrimExpr) -> PrimExpr:
        extent = self.analyzer.simplify(extent)
        if isinstance(extent, IntImm):
            return extent
        hi = self.analyzer.const_int_bound(extent)[1]
        return convert(hi) if hi is not None else extent

    def visit_ProducerStore(self, node):
        e = self._entry(node.producer)
        value = self.visit(node.value)
        indices = [self.visit(i) for i in node.indices]
        return Store(e.data, value, self.analyzer.simplify(e.flat_index(indices)))

    def visit_ProducerLoad(self, node):
        e = self._entry(node.producer)
        indices = [self.visit(i) for i in node.indices]
        return Load(node.dtype, e.data, self.analyzer.simplify(e.flat_index(indices)))


def _offset(buf: Buffer) -> PrimExpr | None:
    """The ``elem_offset`` term of a buffer's accesses (None for no offset or a zero one)."""
    e = buf.elem_offset
    return None if e is None or (isinstance(e, IntImm) and e.value == 0) else e


def _range(lo, extent):
    from kiln.ir.expr import Range

    return Range.from_min_extent(lo, extent)


def storage_flatten(stmt, buffers: dict[object, Buffer]):
    """Flatten all tensor accesses of ``stmt``; ``buffers`` maps argument tensors to Buffers."""
    return _Flattener(buffers, Analyzer()).visit(stmt)
