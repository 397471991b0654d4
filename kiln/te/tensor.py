"""Tensors and the operations that produce them: the operation DAG of tensor expressions.

``placeholder`` makes a PlaceholderOp (an input); ``compute`` makes a ComputeOp whose body says
how each output element is computed. A Tensor is one output of an operation; indexing it
(``A[i, j]``) gives a ProducerLoad expression.
"""

from __future__ import annotations

from kiln.arith import IntervalSet
from kiln.ir import dtype as dt
from kiln.ir.expr import IterVar, PrimExpr, ProducerLoad, Reduce, Var
from kiln.ir.op import convert
from kiln.ir.stmt import Stmt


class Operation:
    """Base class of everything that produces tensors."""

    name: str
    tag: str = ""
    attrs: dict
    #: whether this operation's loop computes other stages inside it (TVM's composite
    #: operations: a scan), so that ``Stage.env_threads`` may run the whole of it inside
    #: GPU thread axes
    composite: bool = False

    def output(self, i: int) -> Tensor:
        return self.outputs[i]

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    @property
    def input_tensors(self) -> list[Tensor]:
        return []

    def root_iter_vars(self) -> list[IterVar]:
        """The loops a stage of this operation starts with (TVM's ``root_iter_vars``)."""
        return []

    def build_provide(self, stage, ranges: dict) -> Stmt:
        """The statement computing this operation's outputs under ``stage``'s loop
        transformations, given the ``ranges`` of its iteration variables (TVM's
        ``BuildProvide``).

        The hook of operations that lower themselves (hybrid, extern, scan): bound inference
        gives their loops the ranges of their own domains, their outputs whole regions and
        their inputs what ``read_region`` says (whole by default). ``ComputeOp``, whose loop
        nest ``kiln.te.schedule_ops`` builds from its body expressions, does not implement
        it.
        """
        raise NotImplementedError(f"{type(self).__name__} does not lower itself")

    def check_primitive(self, primitive: str) -> None:
        """Raise ScheduleError when schedule ``primitive`` cannot apply to a stage of this
        operation (``Stage`` asks before each loop or attachment primitive); every primitive
        applies unless an operation says otherwise (``te.extern`` takes none but
        ``compute_root``)."""

    def attach_group(self, sch) -> None:
        """Attach, in a new schedule ``sch``, the stages this operation computes inside its
        own loops (a scan's update group); by default none."""

    def read_region(self, tensor: Tensor, dom_map: dict[Var, IntervalSet]) -> list[IntervalSet]:
        """The region (an ``IntervalSet`` per dimension) of input ``tensor`` that an
        operation which lowers itself reads while its root variables range over ``dom_map``
        (bound inference asks); by default the whole tensor."""
        return [IntervalSet(0, extent - 1) for extent in tensor.shape]

    def replace_inputs(self, vmap: dict[Tensor, Tensor]) -> Operation:
        """This operation reading the tensors of ``vmap`` through their replacements (a
        dataflow primitive replaced them); itself when nothing changes (by default)."""
        return self

    def output_aliases(self) -> dict[Tensor, Tensor]:
        """Tensors that lowering stores and loads as this operation's outputs (a scan's
        init, update and state placeholder); by default none."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


class PlaceholderOp(Operation):
    """An input tensor to be fed at run time."""

    def __init__(self, name: str, shape, dtype: str):
        self.name = name
        self.tag = ""
        self.attrs = {}
        self.shape = tuple(shape)
        self.dtype = dtype
        self.outputs = [Tensor(self.shape, dtype, self, 0)]


class BaseComputeOp(Operation):
    axis: list[IterVar]
    reduce_axis: list[IterVar]


class ComputeOp(BaseComputeOp):
    """``out[axis] = body`` for every point of ``axis`` (body may be a Reduce)."""

    def __init__(self, name: str, tag: str, attrs: dict | None, axis: list[IterVar],
                 body: list[PrimExpr]):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.axis = list(axis)
        self.body = list(body)
        first = body[0]
        self.reduce_axis = list(first.axis) if isinstance(first, Reduce) else []
        shape = tuple(iv.dom.extent for iv in self.axis)
        self.outputs = [Tensor(shape, b.dtype, self, i) for i, b in enumerate(body)]
        self._inputs: tuple[Tensor, ...] | None = None  # input_tensors, once found

    def root_iter_vars(self) -> list[IterVar]:
        return self.axis + self.reduce_axis

    @property
    def input_tensors(self) -> list[Tensor]:
        """The tensors this operation reads (a property, as in TVM), in the order of their
        first read; found once (the body does not change after construction)."""
        if self._inputs is None:
            from kiln.ir.functor import post_order_visit

            found: list[Tensor] = []

            def visit(n):
                if isinstance(n, ProducerLoad) and n.producer not in found:
                    found.append(n.producer)

            for b in self.body:
                post_order_visit(b, visit)
            self._inputs = tuple(found)
        return list(self._inputs)


class Tensor:
    """A multi-dimensional array produced by ``op`` (output number ``value_index``)."""

    def __init__(self, shape, dtype: str, op: Operation, value_index: int):
        self.shape = _Shape(convert(s) for s in shape)
        self.dtype = dt.normalize(dtype)
        self.op = op
        self.value_index = value_index

    @property
    def name(self) -> str:
        if len(getattr(self.op, "outputs", ())) > 1:
            return f"{self.op.name}.v{self.value_index}"
        return self.op.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> ProducerLoad | TensorSlice:
        if not isinstance(indices, tuple):
            indices = (indices,)
        flat: list = []
        for x in indices:
            if isinstance(x, tuple | list):
                flat.extend(x)
            else:
                flat.append(x)
        if len(flat) < self.ndim:
            return TensorSlice(self, tuple(flat))
        if len(flat) != self.ndim:
            raise IndexError(
                f"tensor {self.name} has {self.ndim} dimensions but was indexed with "
                f"{len(flat)} indices")
        return ProducerLoad(self, [_index(x) for x in flat])

    def __call__(self, *indices):
        return self[indices]

    def __hash__(self):
        return hash((id(self.op), self.value_index))

    def __eq__(self, other):
        if isinstance(other, Tensor):
            return self.op is other.op and self.value_index == other.value_index
        return False

    def __ne__(self, other):
        return not self.__eq__(other)

    def __repr__(self) -> str:
        return f"Tensor(shape={list(self.shape)}, op.name={self.op.name})"

    def same_as(self, other) -> bool:
        return self == other

    def __iter__(self):
        raise TypeError("a Tensor is not iterable; index it with A[i, ...] inside te.compute")

    # Tensor arithmetic builds broadcasting topi operators, as TVM's Tensor does.
    def _topi(self, name: str, other, reverse: bool = False):
        from kiln import topi

        fn = getattr(topi, name, None)
        if fn is None:
            raise NotImplementedError(f"Tensor arithmetic needs kiln.topi.{name}")
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, other):
        return self._topi("add", other)

    def __radd__(self, other):
        return self._topi("add", other, reverse=True)

    def __sub__(self, other):
        return self._topi("subtract", other)

    def __rsub__(self, other):
        return self._topi("subtract", other, reverse=True)

    def __mul__(self, other):
        return self._topi("multiply", other)

    def __rmul__(self, other):
        return self._topi("multiply", other, reverse=True)

    def __truediv__(self, other):
        return self._topi("divide", other)

    def __rtruediv__(self, other):
        return self._topi("divide", other, reverse=True)


class TensorSlice:
    """``A[i]`` of a tensor with more dimensions: index it further to get an element."""

    def __init__(self, tensor: Tensor, indices: tuple):
        self.tensor = tensor
        self.indices = indices

    def __getitem__(self, more):
        if not isinstance(more, tuple):
            more = (more,)
        return self.tensor[self.indices + more]

    @property
    def dtype(self) -> str:
        return self.tensor.dtype


class _Shape(list):
    """A tensor's shape: a list of expressions that prints like TVM's ([100])."""

    def __repr__(self) -> str:
        from kiln.ir.printer import expr_text

        return "[" + ", ".join(expr_text(x) for x in self) + "]"

    __str__ = __repr__


def _index(x) -> PrimExpr:
    e = convert(x)
    if not dt.is_integer(e.dtype):
        raise TypeError(f"tensor index must be an integer expression, got {e} of type {e.dtype}")
    return e


def iter_var_name(v: IterVar) -> str:
    return v.var.name


def new_axis(extent, name: str, kind: int = IterVar.DataPar) -> IterVar:
    from kiln.ir.expr import Range

    return IterVar(Range(0, extent), Var(name, "int32"), kind)
