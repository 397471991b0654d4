"""kiln's graph IR: a dataflow graph of typed, shaped operator nodes.

A :class:`Node` is an input (``op="input"``), a constant (``op="const"``, holding a numpy
value) or an operator call (``op`` one of :data:`kiln.relay.op.OPS`) with its inputs, its
attributes and its inferred output shape and dtype. A :class:`Graph` lists its nodes in
topological order; :class:`Module` wraps the main graph as ``mod["main"]``.
"""

from __future__ import annotations

import functools
import itertools
import operator
from dataclasses import dataclass, field

import numpy as np

from kiln.ir.expr import PrimExpr

_ids = itertools.count()


@dataclass(eq=False)
class Node:
    """One value of the graph: input, constant or operator call."""

    op: str
    inputs: list[Node] = field(default_factory=list)
    attrs: dict = field(default_factory=dict)
    shape: tuple[int | PrimExpr, ...] = ()  # a symbolic dimension is an expression
    dtype: str = "float32"
    name: str = ""
    value: np.ndarray | None = None  # constants only
    layout: str = ""  # data layout set by the layout pass ("NCHW16c" ...); "" = as imported
    uid: int = field(default_factory=lambda: next(_ids))

    @property
    def is_const(self) -> bool:
        return self.op == "const"

    @property
    def is_input(self) -> bool:
        return self.op == "input"

    @property
    def is_static(self) -> bool:
        """Whether every dimension is a constant (no symbolic ``te.var`` dimension)."""
        return all(isinstance(s, int) for s in self.shape)

    @property
    def nbytes(self) -> int | PrimExpr:
        """Bytes of the value: an int, or an expression of the symbolic dimensions."""
        size = np.dtype(self.dtype).itemsize
        if self.is_static:
            return int(np.prod(self.shape, dtype=np.int64)) * size
        return functools.reduce(operator.mul, self.shape, size)

    def __repr__(self) -> str:
        return f"Node({self.op}, {self.name or self.uid}, {list(self.shape)}, {self.dtype})"


def const(value, name: str = "") -> Node:
    v = np.array(value, copy=True, order="C")  # keeps 0-d arrays 0-d
    return Node("const", shape=tuple(v.shape), dtype=v.dtype.name, name=name, value=v)


def input_node(name: str, shape, dtype: str = "float32") -> Node:
    return Node("input", shape=tuple(s if isinstance(s, PrimExpr) else int(s) for s in shape),
                dtype=dtype, name=name)


def call(op: str, inputs: list[Node], name: str = "", **attrs) -> Node:
    """An operator node; its shape and dtype are inferred now (errors name the node)."""
    from .op import infer_type

    n = Node(op, list(inputs), dict(attrs), name=name)
    n.shape, n.dtype = infer_type(n)
    return n


def topo_sort(outputs: list[Node]) -> list[Node]:
    order: list[Node] = []
    seen: set[int] = set()
    stack = [(o, False) for o in reversed(outputs)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if n.uid in seen:
            continue
        seen.add(n.uid)
        stack.append((n, True))
        stack.extend((i, False) for i in reversed(n.inputs) if i.uid not in seen)
    return order


class Graph:
    """A function: named inputs, output nodes, nodes in topological order."""

    def __init__(self, inputs: list[Node], outputs: list[Node]) -> None:
        self.inputs = list(inputs)
        self.outputs = list(outputs)

    @property
    def nodes(self) -> list[Node]:
        return topo_sort(self.outputs)

    def symbolic_dims(self) -> list[str]:
        """The names of the inputs' symbolic dimensions, sorted ([] for a static graph)."""
        return sorted({str(d) for i in self.inputs for d in i.shape if not isinstance(d, int)})

    def users(self) -> dict[int, list[Node]]:
        out: dict[int, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                out.setdefault(i.uid, []).append(n)
        return out

    def astext(self) -> str:
        names: dict[int, str] = {}
        lines = []
        sig = ", ".join(f"%{i.name}: Tensor[{_shp(i)}, {i.dtype}]" for i in self.inputs)
        for i in self.inputs:
            names[i.uid] = f"%{i.name}"
        lines.append(f"fn ({sig}) {{")
        k = 0
        for n in self.nodes:
            if n.is_input:
                names.setdefault(n.uid, f"%{n.name}")
                continue
            if n.is_const:
                names[n.uid] = f"meta[{n.name or 'const'}:{_shp(n)}]"
                continue
            args = [names[i.uid] for i in n.inputs]
            args += [f"{a}={_fmt(v)}" for a, v in n.attrs.items()]
            names[n.uid] = f"%{k}"
            note = f"  /* {n.name} */" if n.name else ""
            lay = f" {n.layout}" if n.layout else ""
            lines.append(f"  %{k} = {n.op}({', '.join(args)}) "
                         f"/* ty=Tensor[{_shp(n)}, {n.dtype}]{lay} */{note}")
            k += 1
        outs = ", ".join(names[o.uid] for o in self.outputs)
        lines.append(f"  {outs if len(self.outputs) == 1 else '(' + outs + ')'}")
        lines.append("}")
        return "\n".join(lines)

    __str__ = astext


def _shp(n: Node) -> str:
    return "(" + ", ".join(str(s) for s in n.shape) + ("," if len(n.shape) == 1 else "") + ")"


def _fmt(v) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:g}f"
    return str(v)


class Module:
    """An IRModule holding one graph function, ``mod["main"]``."""

    def __init__(self, main: Graph) -> None:
        self.main = main

    def __getitem__(self, name: str) -> Graph:
        if name != "main":
            raise KeyError(f"module has no function {name!r} (only 'main')")
        return self.main

    def astext(self) -> str:
        return "def @main" + self.main.astext()[2:]

    __str__ = astext

    @staticmethod
    def from_expr(outputs, inputs) -> Module:
        outs = outputs if isinstance(outputs, list) else [outputs]
        return Module(Graph(list(inputs), outs))
