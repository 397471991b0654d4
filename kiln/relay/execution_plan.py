"""The graph executor's execution plan of a compiled graph (TVM's graph JSON).

:func:`execution_plan` turns the optimized graph, its compiled kernels and the static memory
plan into what :class:`kiln.runtime.graph_executor.GraphExecutorFactoryModule` runs: a list
of tensors (each an input, a constant, a view into a planned storage, or a buffer of its
own), the kernel calls in run order and the graph's outputs. The runtime reads only this
plan, never the graph IR.
"""

from __future__ import annotations

import numpy as np

from .graph import Graph, Node


def execution_plan(g: Graph, kernels: list[tuple[str, list[Node], Node]],
                   assign: dict[int, int], sizes: list[int], mod_name: str = "default",
                   device: str = "cpu") -> tuple[dict, dict[str, np.ndarray]]:
    """``(plan, consts)`` for ``g``: ``kernels`` are ``(function name, external inputs,
    output)`` in run order, ``assign`` maps a node's uid to its storage, ``sizes`` are the
    storages' byte sizes, ``device`` the kind of device the kernels run on (``"cpu"`` or
    ``"cuda"``: every tensor of the plan lives there); ``consts`` holds the constants the
    plan names."""
    tid: dict[int, int] = {}
    tensors: list[dict] = []
    consts: dict[str, np.ndarray] = {}

    def tensor(n: Node) -> int:
        if n.uid in tid:
            return tid[n.uid]
        t = {"shape": list(n.shape), "dtype": n.dtype, "name": n.name}
        if n.is_const:
            key = f"c{len(consts)}_{n.name}"
            consts[key] = n.value
            t["const"] = key
        elif n.is_input:
            t["input"] = n.name
        elif n.uid in assign:
            t["storage"] = assign[n.uid]
        tid[n.uid] = len(tensors)
        tensors.append(t)
        return tid[n.uid]

    for i in g.inputs:
        tensor(i)
    steps = [{"func": name, "args": [tensor(i) for i in ext] + [tensor(out)]}
             for name, ext, out in kernels]
    outputs = [tensor(o) for o in g.outputs]
    plan = {"tensors": tensors, "steps": steps, "outputs": outputs, "storages": sizes,
            "inputs": [i.name for i in g.inputs], "mod_name": mod_name, "device": device}
    return plan, consts
