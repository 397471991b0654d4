"""Post-training quantization (TVM's ``relay.quantize.quantize`` under ``relay.quantize.qconfig``):
a float model's convolutions and dense layers rewritten for int8 from calibration data.

``quantize(mod, params, dataset)`` binds the parameters and folds batch norms into the
weights, then puts around each convolution (not grouped) and dense layer with a constant
weight the quantize / dequantize pattern a QDQ model has::

    dequantize(quantize([relu]([bias_add](anchor(dequantize(quantize(x)), dequantize(w_q))))))

``relay.build``'s ``fake_quantization_to_integer`` then makes each an int8 kernel with int32
accumulation and fused requantization (kiln/relay/quantize.py), exactly as for an imported
QDQ model. Activations are quantized per tensor, symmetric (zero point 0), with the scale
``qconfig``'s ``calibrate_mode`` gives: ``"max"`` (the largest ``|x|`` over the dataset /
127), ``"percentile"`` (the ``percentile``-th percentile of ``|x|`` / 127) or
``"global_scale"`` (``global_scale`` / 128 everywhere, TVM's default, no data needed);
weights per output channel (their largest ``|w|`` / 127). ``skip_conv_layers`` (default
``[0]``, as in TVM: the first convolution, which sees the raw input) stay float.
Calibration compiles the float model once with the anchors' inputs and outputs as extra
outputs and runs it on each sample of ``dataset`` (dicts of input name -> array).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from kiln.errors import TVMError

from . import transform as T
from .graph import Graph, Module, Node, call, const

__all__ = ["QConfig", "qconfig", "current_qconfig", "quantize"]

_CALIBRATE_MODES = ("global_scale", "max", "percentile")


@dataclass(frozen=True)
class QConfig:
    """What :func:`quantize` does (TVM's ``qconfig`` knobs that kiln reads)."""

    calibrate_mode: str = "global_scale"
    global_scale: float = 8.0
    percentile: float = 99.99
    weight_scale: str = "max"
    skip_conv_layers: tuple[int, ...] = field(default=(0,))

    def __post_init__(self) -> None:
        if self.calibrate_mode not in _CALIBRATE_MODES:
            raise ValueError(f"qconfig: calibrate_mode must be one of {_CALIBRATE_MODES}, "
                             f"got {self.calibrate_mode!r}")
        if self.weight_scale != "max":
            raise NotImplementedError(f"qconfig: weight_scale={self.weight_scale!r} (kiln "
                                      "scales weights by their largest magnitude: 'max')")


_STATE = threading.local()


def current_qconfig() -> QConfig:
    return getattr(_STATE, "config", None) or QConfig()


@contextlib.contextmanager
def qconfig(**kwargs) -> Iterator[QConfig]:
    """``with relay.quantize.qconfig(calibrate_mode="max"): qmod = relay.quantize.quantize(
    mod, params, dataset)``; a ``skip_conv_layers`` of None quantizes every convolution."""
    if "skip_conv_layers" in kwargs:
        kwargs["skip_conv_layers"] = tuple(kwargs["skip_conv_layers"] or ())
    previous = getattr(_STATE, "config", None)
    _STATE.config = cfg = replace(current_qconfig(), **kwargs)
    try:
        yield cfg
    finally:
        _STATE.config = previous


@dataclass
class _Site:
    anchor: Node  # the convolution or dense
    tail: Node  # the node after its bias add and relu, where the output is quantized


def _sites(g: Graph, skip: tuple[int, ...]) -> list[_Site]:
    users, outs = g.users(), {o.uid for o in g.outputs}

    def only_user(n: Node) -> Node | None:
        us = users.get(n.uid, [])
        return us[0] if len(us) == 1 and n.uid not in outs else None

    sites, conv_index = [], 0
    for n in g.nodes:
        if n.op == "conv2d":
            index, conv_index = conv_index, conv_index + 1
            if index in skip or n.attrs.get("groups", 1) != 1 or \
                    n.attrs.get("depthwise_layout"):
                continue
        elif n.op != "dense":
            continue
        if not n.inputs[1].is_const or n.inputs[1].dtype != "float32":
            continue
        tail = n
        nxt = only_user(tail)
        if n.op == "dense" and nxt is not None and nxt.op in ("bias_add", "add") and \
                nxt.inputs[0] is tail and nxt.inputs[1].is_const and \
                len(nxt.inputs[1].shape) == 1:
            tail, nxt = nxt, only_user(nxt)
        if nxt is not None and nxt.op == "relu":
            tail = nxt
        sites.append(_Site(n, tail))
    return sites


def _calibrate(g: Graph, sites: list[_Site], dataset: Iterable[dict], cfg: QConfig
               ) -> dict[int, float]:
    """The largest magnitude (or its percentile) of every anchor's input and tail."""
    from kiln.runtime.device import cpu
    from kiln.runtime.graph_executor import GraphModule

    from .build_module import build

    watched: dict[int, Node] = {}
    for s in sites:
        watched.setdefault(s.anchor.inputs[0].uid, s.anchor.inputs[0])
        watched.setdefault(s.tail.uid, s.tail)
    nodes = list(watched.values())
    lib = build(Module(Graph(g.inputs, nodes)), "llvm")
    gm = GraphModule(lib["default"](cpu(0)))
    samples: dict[int, list[np.ndarray]] = {n.uid: [] for n in nodes}
    count = 0
    for feed in dataset:
        gm.set_input(**feed)
        gm.run()
        for k, n in enumerate(nodes):
            samples[n.uid].append(np.abs(gm.get_output(k).numpy()).reshape(-1))
        count += 1
    if not count:
        raise TVMError("relay.quantize.quantize: calibrate_mode "
                       f"{cfg.calibrate_mode!r} needs a dataset of at least one sample")
    if cfg.calibrate_mode == "max":
        return {uid: float(max(v.max() for v in vs)) for uid, vs in samples.items()}
    return {uid: float(np.percentile(np.concatenate(vs), cfg.percentile))
            for uid, vs in samples.items()}


def _qdq(x: Node, scale: float, name: str) -> Node:
    s, z = const(np.float32(max(scale, 1e-12))), const(np.int8(0))
    q = call("qnn.quantize", [x, s, z], name=f"{name}_q", axis=1)
    return call("qnn.dequantize", [q, s, z], name=f"{name}_dq", axis=1)


def _weight(w: Node, name: str) -> Node:
    """``dequantize(w_q)``: the weight in int8 per output channel (axis 0)."""
    v = w.value.astype(np.float32)
    amax = np.abs(v.reshape(v.shape[0], -1)).max(axis=1)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    shape = (-1,) + (1,) * (v.ndim - 1)
    wq = np.clip(np.rint(v / scale.reshape(shape)), -127, 127).astype(np.int8)
    return call("qnn.dequantize", [const(wq, f"{name}_w_int8"), const(scale),
                                   const(np.zeros(scale.shape, np.int8))],
                name=f"{name}_w_dq", axis=0)


def quantize(mod, params: dict | None = None, dataset: Iterable[dict] | None = None) -> Module:
    """``mod`` (a ``kiln.relay`` module) with its convolutions and dense layers quantized
    for int8 under the current :func:`qconfig` (module doc); build it with ``relay.build``."""
    cfg = current_qconfig()
    g = mod["main"] if isinstance(mod, Module) else mod
    g = T.fold_constant(T.fold_batch_norm(T.fold_constant(T.bind_params(g, params))))
    sites = _sites(g, cfg.skip_conv_layers)
    if not sites:
        return Module(g)
    if cfg.calibrate_mode == "global_scale":
        amax = {n.uid: cfg.global_scale * 127.0 / 128.0
                for s in sites for n in (s.anchor.inputs[0], s.tail)}
    else:
        amax = _calibrate(g, sites, dataset or (), cfg)
    anchors = {s.anchor.uid: s for s in sites}
    tails = {s.tail.uid: s for s in sites}

    def fn(n: Node, xs: list[Node]) -> Node | None:
        if n.uid not in anchors and n.uid not in tails:
            return None
        out = n
        if n.uid in anchors:
            x = _qdq(xs[0], amax[n.inputs[0].uid] / 127.0, f"{n.name}_in")
            out = call(n.op, [x, _weight(n.inputs[1], n.name), *xs[2:]], name=n.name,
                       **n.attrs)
        elif xs != n.inputs:
            out = call(n.op, xs, name=n.name, **n.attrs)
        if n.uid in tails:
            out = _qdq(out, amax[n.uid] / 127.0, f"{n.name}_out")
        return out

    return Module(T.rewrite(g, fn))
