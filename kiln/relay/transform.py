"""Graph passes: parameter binding, constant folding, batch-norm folding into convolutions,
depthwise weight layout, operator fusion, views (reshape-only groups that need no kernel) and
memory planning (static; a graph with symbolic dimensions gets its intermediates'
lifetimes, planned at run time)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kiln.runtime.graph_executor import plan_storages

from .const_memo import memo_transform
from .graph import Graph, Node, call, const
from .op import BROADCAST, INJECTIVE, OPS, OUT_ELEMWISE_FUSABLE, PATTERN_NAMES, pattern


def rewrite(graph: Graph, fn) -> Graph:
    """Rebuild ``graph`` bottom-up; ``fn(old_node, new_inputs)`` returns the new node (or None
    to keep the node with its inputs replaced)."""
    memo: dict[int, Node] = {}
    for n in graph.nodes:
        new_inputs = [memo[i.uid] for i in n.inputs]
        out = fn(n, new_inputs)
        if out is None:
            if all(a is b for a, b in zip(new_inputs, n.inputs, strict=True)):
                out = n
            else:
                out = call(n.op, new_inputs, name=n.name, **n.attrs) if not (
                    n.is_const or n.is_input) else n
        memo[n.uid] = out
    return Graph([memo.get(i.uid, i) for i in graph.inputs], [memo[o.uid] for o in graph.outputs])


def bind_params(graph: Graph, params: dict | None) -> Graph:
    """Replace the values of parameter constants (and inputs) named in ``params``."""
    if not params:
        return graph
    params = {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v) for k, v in params.items()}

    def fn(n, _):
        if (n.is_const and n.attrs.get("param") or n.is_input) and n.name in params:
            v = params[n.name]
            if tuple(v.shape) != tuple(n.shape):
                raise ValueError(f"param {n.name!r}: shape {v.shape} does not match the "
                                 f"graph's {n.shape}")
            c = const(v.astype(n.dtype, copy=False), n.name)  # const copies
            c.attrs["param"] = True
            return c
        return None

    g = rewrite(graph, fn)
    g.inputs = [i for i in g.inputs if not i.is_const]
    return g


def fold_constant(graph: Graph) -> Graph:
    """Evaluate (numpy) operators whose inputs are all constants."""
    def fn(n, xs):
        if n.is_const or n.is_input or not xs or not all(x.is_const for x in xs):
            return None
        ev = OPS[n.op][2]
        if ev is None:
            return None
        v = np.asarray(ev([x.value for x in xs], n.attrs)).astype(n.dtype)
        return const(v.reshape(n.shape), f"{n.name or n.op}_folded")

    return rewrite(graph, fn)


def fold_batch_norm(graph: Graph) -> Graph:
    """``multiply(conv2d(x, w[, b]), scale[C,1,1])`` -> ``conv2d(x, w*scale[, b*scale])`` (the
    shift of a batch norm stays a bias add that fusion puts in the conv's kernel)."""
    users = graph.users()
    outs = {o.uid for o in graph.outputs}

    def fn(n, xs):
        if n.op != "multiply" or len(xs) != 2:
            return None
        c, s = xs
        old_c = n.inputs[0]
        if (c.op != "conv2d" or not s.is_const or len(users.get(old_c.uid, [])) != 1
                or old_c.uid in outs or not c.inputs[1].is_const):
            return None
        oc = c.shape[1]
        if s.value.size != oc or s.value.shape not in ((oc, 1, 1), (1, oc, 1, 1)):
            return None
        scale = s.value.reshape(oc).astype(np.float64)
        w = c.inputs[1].value
        w2 = memo_transform(_scale_weight, w, s.value,
                            depthwise=bool(c.attrs.get("depthwise_layout")))
        ins = [c.inputs[0], const(w2, f"{c.inputs[1].name}_bnfold")]
        if len(c.inputs) > 2:
            if not c.inputs[2].is_const:
                return None
            ins.append(const((c.inputs[2].value * scale).astype(w.dtype), "bias_bnfold"))
        return call("conv2d", ins, name=c.name, **c.attrs)

    return rewrite(graph, fn)


def _scale_weight(w: np.ndarray, scale: np.ndarray, depthwise: bool) -> np.ndarray:
    """Convolution weight ``w`` times a per-output-channel ``scale`` (computed in float64,
    returned in ``w``'s dtype); ``depthwise``: ``w`` in topi's depthwise layout."""
    per_channel = (*w.shape[:2], 1, 1) if depthwise else (-1, 1, 1, 1)
    return (w * scale.astype(np.float64).reshape(per_channel)).astype(w.dtype)


def depthwise_layout(graph: Graph) -> Graph:
    """Depthwise convolutions with constant weights ``[C*M, 1, KH, KW]`` get topi's depthwise
    layout ``[C, M, KH, KW]`` (and its schedule)."""
    def fn(n, xs):
        if n.op != "conv2d" or n.attrs.get("depthwise_layout"):
            return None
        g = n.attrs.get("groups", 1)
        x, w = xs[0], xs[1]
        if g == 1 or g != x.shape[1] or w.shape[1] != 1 or not w.is_const:
            return None
        oc, _, kh, kw = w.shape
        w2 = const(w.value.reshape(g, oc // g, kh, kw), f"{w.name}_dw")
        return call("conv2d", [x, w2] + xs[2:], name=n.name, **n.attrs, depthwise_layout=True)

    return rewrite(graph, fn)


# ---- fusion ---------------------------------------------------------------------------------
@dataclass(eq=False)
class Group:
    """A fused group: op nodes computed by one kernel; ``nodes[-1]`` is its output."""

    nodes: list[Node] = field(default_factory=list)
    anchor_pattern: int = 0

    @property
    def output(self) -> Node:
        return self.nodes[-1]

    @property
    def outputs(self) -> list[Node]:
        """The nodes the group's kernel writes (its output)."""
        return [self.output]

    def describe(self) -> str:
        kind = PATTERN_NAMES.get(self.anchor_pattern, str(self.anchor_pattern))
        return f"{' + '.join(op_label(n) for n in self.nodes)}  [{kind}]"


def op_label(n: Node) -> str:
    """The op name, with depthwise / grouped convolutions told apart."""
    if n.op == "conv2d":
        if n.attrs.get("depthwise_layout"):
            return "depthwise_conv2d"
        if n.attrs.get("groups", 1) > 1:
            return "group_conv2d"
    return n.op


def fuse_ops(graph: Graph, opt_level: int = 3) -> list[Group]:
    """Greedy fusion by TVM's pattern kinds: elementwise/broadcast operators join the group of
    a producer that is complex-out-fusable (conv2d, dense) or injective, when that producer is
    the group's output and has no other user; injective chains fuse together. Reductions and
    opaque operators (pooling, softmax) stay kernels of their own.

    A group output with several users joins them all at once when they meet again at one
    node (a diamond: GELU's ``x * (1 + erf(x / sqrt 2))``, whose two paths from ``x`` meet
    at the product) and every node on the paths may join the group (:func:`_diamond`), as
    TVM fuses up to the post-dominator."""
    users = graph.users()
    outs = {o.uid for o in graph.outputs}
    pos = {n.uid: k for k, n in enumerate(graph.nodes)}
    group_of: dict[int, Group] = {}
    groups: list[Group] = []
    for n in graph.nodes:
        if n.is_const or n.is_input or n.uid in group_of:
            continue
        p = pattern(n.op)
        target, joined = None, [n]
        if opt_level >= 1 and p <= INJECTIVE:
            for q in n.inputs:
                g = group_of.get(q.uid)
                if g is None or g.output is not q or q.uid in outs:
                    continue
                region = [n]
                if len(users.get(q.uid, [])) != 1:
                    region = _diamond(q, users, outs, pos)
                    if region is None or any(r.uid in group_of for r in region):
                        continue  # (a user of q run earlier joined another group)
                if any(not _may_join(g.anchor_pattern, pattern(r.op)) for r in region):
                    continue
                if target is None or g.anchor_pattern > target.anchor_pattern:
                    target, joined = g, region
        if target is None:
            target = Group(anchor_pattern=p)
            groups.append(target)
        for r in joined:
            target.anchor_pattern = max(target.anchor_pattern, pattern(r.op))
            target.nodes.append(r)
            group_of[r.uid] = target
    # run order: a group needs only the outputs of other groups (interior nodes have a single
    # user inside the group), so ordering groups by their output's topological position is a
    # valid schedule even when a node joined a group created earlier than one of its inputs'.
    groups.sort(key=lambda g: pos[g.output.uid])
    return groups


def _may_join(anchor: int, p: int) -> bool:
    """Whether an operator of pattern ``p`` may join a group of anchor pattern ``anchor``
    as its new output: elementwise/broadcast after a complex-out-fusable operator, up to
    injective after an injective group."""
    if anchor == OUT_ELEMWISE_FUSABLE:
        return p <= BROADCAST
    return anchor <= INJECTIVE and p <= INJECTIVE


#: the most nodes a diamond (:func:`_diamond`) may hold
_MAX_DIAMOND = 16


def _diamond(q: Node, users: dict[int, list[Node]], outs: set[int],
             pos: dict[int, int]) -> list[Node] | None:
    """The nodes on the paths from ``q`` to the node where they all meet (the immediate
    post-dominator of ``q``), that node last, in run order: None when the paths reach a
    graph output or a node without users before they meet, or hold more than
    :data:`_MAX_DIAMOND` nodes. Every user of a returned node but the last is a returned
    node, so the region joins ``q``'s group with one output, its last node."""
    frontier = {u.uid: u for u in users.get(q.uid, [])}
    region: list[Node] = []
    while len(frontier) > 1:
        f = min(frontier.values(), key=lambda x: pos[x.uid])
        del frontier[f.uid]
        nexts = users.get(f.uid, [])
        if f.uid in outs or not nexts or len(region) >= _MAX_DIAMOND:
            return None
        region.append(f)
        frontier.update((u.uid, u) for u in nexts)
    if not frontier:
        return None
    return region + list(frontier.values())


# ---- views and memory planning -------------------------------------------------------------
#: operators whose output is their input's memory read with another shape
_VIEW_OPS = frozenset({"reshape", "flatten"})


def view_groups(groups: list[Group], graph: Graph) -> dict[int, int]:
    """The groups that only reshape an intermediate (TVM's ``reshape_only`` functions): a
    group of reshapes whose input is the output of another group and neither tensor is a
    graph output. Such a group needs no kernel: its output is a view of its input's storage.
    Returns view node uid -> uid of the node whose storage it reads (itself no view)."""
    outs = {o.uid for o in graph.outputs}
    produced = {g.output.uid for g in groups}
    views: dict[int, int] = {}
    for g in groups:  # run order: a view's input is decided before the view
        src = g.nodes[0].inputs[0]
        if (all(n.op in _VIEW_OPS for n in g.nodes) and src.uid in produced
                and src.uid not in outs and g.output.uid not in outs):
            views[g.output.uid] = views.get(src.uid, src.uid)
    return views


def lifetimes(groups: list[Group], graph: Graph,
              views: dict[int, int] | None = None) -> dict[int, tuple[int, int]]:
    """The first and last step (kernel index) of each intermediate: a group output that is
    not a graph output, by node uid, in run order; a read of a view (:func:`view_groups`)
    is a read of the tensor it views. ``groups`` are the kernels: a
    :class:`.horizontal_fusion.HorizontalGroup` writes all its groups' outputs in one step."""
    outs = {o.uid for o in graph.outputs}
    views = views or {}
    last_use: dict[int, int] = {}
    for k, g in enumerate(groups):
        for n in g.nodes:
            for i in n.inputs:
                last_use[views.get(i.uid, i.uid)] = k
    return {o.uid: (k, last_use.get(o.uid, k)) for k, g in enumerate(groups)
            for o in g.outputs if o.uid not in outs}


def plan_memory(groups: list[Group], graph: Graph, views: dict[int, int] | None = None
                ) -> tuple[dict[int, int], list[int], int]:
    """Assign each intermediate (a group output that is not a graph output) a storage id,
    reusing storages whose tensors are dead (liveness by kernel order, best fit:
    :func:`kiln.runtime.graph_executor.plan_storages`, which plans a dynamic graph's
    storages at run time); a view (:func:`view_groups`, not among ``groups``) gets the
    storage of the tensor it views. The graph's shapes must be static.

    Returns (node uid -> storage id, storage sizes in bytes, bytes without reuse)."""
    live = lifetimes(groups, graph, views)
    nodes = {o.uid: o for g in groups for o in g.outputs}
    need = {uid: max(nodes[uid].nbytes, 1) for uid in live}
    sids, sizes = plan_storages([(*live[uid], need[uid]) for uid in live])
    assign = dict(zip(live, sids, strict=True))
    assign.update((view, assign[src]) for view, src in (views or {}).items())
    return assign, sizes, sum(need.values())
