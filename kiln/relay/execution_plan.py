"""The graph executor's execution plan of a compiled graph (TVM's graph JSON).

:func:`execution_plan` turns the optimized graph, its compiled kernels and the static memory
plan into what :class:`kiln.runtime.graph_executor.GraphExecutorFactoryModule` runs: a list
of tensors (each an input, a constant, a view into a planned storage, or a buffer of its
own), the kernel calls in run order and the graph's outputs. The runtime reads only this
plan, never the graph IR.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln.ir.expr import PrimExpr, Var
from kiln.ir.functor import collect_vars

from .graph import Graph, Node


def execution_plan(g: Graph, kernels: list[tuple[str, list[Node], list[Node]]],
                   assign: dict[int, int], sizes: list[int] | None, mod_name: str = "default",
                   device: str = "cpu", live: dict[int, tuple[int, int]] | None = None,
                   rows: dict[str, Callable[[Callable[[Node], int]], dict]] | None = None
                   ) -> tuple[dict, dict[str, np.ndarray]]:
    """``(plan, consts)`` for ``g``: ``kernels`` are ``(function name, external inputs,
    outputs)`` in run order, ``assign`` maps a node's uid to its storage, ``sizes`` are the
    storages' byte sizes, ``device`` the kind of device the kernels run on (``"cpu"`` or
    ``"cuda"``: every tensor of the plan lives there); ``consts`` holds the constants the
    plan names.

    A graph with symbolic dimensions has no static storages (``sizes`` None): its plan
    names each dimension's source (``shape_vars``: name -> ``[input, axis]``), writes
    symbolic dimensions as expressions and gives each intermediate its first and last step
    (``live``, from :func:`.transform.lifetimes`) for the run-time memory plan. A step
    whose function ``rows`` names runs row-blocked kernels instead (its ``rows`` entry,
    :meth:`.row_blocks.RowBlocks.step` given the plan's numbering of the nodes)."""
    tid: dict[int, int] = {}
    tensors: list[dict] = []
    consts: dict[str, np.ndarray] = {}

    def tensor(n: Node) -> int:
        if n.uid in tid:
            return tid[n.uid]
        t = {"shape": [s if isinstance(s, int) else str(s) for s in n.shape],
             "dtype": n.dtype, "name": n.name}
        if n.is_const:
            key = f"c{len(consts)}_{n.name}"
            consts[key] = n.value
            t["const"] = key
        elif n.is_input:
            t["input"] = n.name
        elif n.uid in assign:
            t["storage"] = assign[n.uid]
        elif live is not None and n.uid in live:
            t["live"] = list(live[n.uid])
        tid[n.uid] = len(tensors)
        tensors.append(t)
        return tid[n.uid]

    for i in g.inputs:
        tensor(i)
    steps = [{"func": name, "args": [tensor(i) for i in ext] + [tensor(o) for o in outs]}
             for name, ext, outs in kernels]
    for st in steps:
        if rows and st["func"] in rows:
            st["rows"] = rows[st["func"]](tensor)
    outputs = [tensor(o) for o in g.outputs]
    plan = {"tensors": tensors, "steps": steps, "outputs": outputs, "storages": sizes,
            "inputs": [i.name for i in g.inputs], "mod_name": mod_name, "device": device}
    if sizes is None:
        plan["shape_vars"] = shape_vars(g)
    return plan, consts


def shape_vars(g: Graph) -> dict[str, list]:
    """Each symbolic dimension of ``g`` -> ``[input name, axis]`` where the graph module
    reads its value; NotImplementedError names a dimension no input's axis gives (the
    graph module could not tell its value)."""
    found: dict[str, list] = {}
    for i in g.inputs:
        for ax, d in enumerate(i.shape):
            if isinstance(d, Var):
                found.setdefault(d.name, [i.name, ax])
            elif not isinstance(d, int):
                raise NotImplementedError(f"input {i.name!r}: the dimension {d} (axis {ax}) "
                                          f"is an expression; a symbolic input dimension "
                                          f"must be a variable")
    for n in g.nodes:
        for d in n.shape:
            for v in ([] if isinstance(d, int) else _vars(d)):
                if v not in found:
                    raise NotImplementedError(f"{n.op} ({n.name or 'unnamed'}): its symbolic "
                                              f"dimension {v} is no input's dimension")
    return found


def _vars(e: PrimExpr) -> set[str]:
    """Names of the variables in ``e``."""
    return {v.name for v in collect_vars(e)}
