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
127), ``"percentile"`` (the ``percentile``-th percentile of ``|x|`` / 127),
``"kl_divergence"`` (the threshold minimizing the KL divergence between the distribution of
``x`` over the dataset and its quantized form, :func:`kl_divergence_scale`, / 127) or
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

__all__ = ["QConfig", "qconfig", "current_qconfig", "quantize", "kl_divergence_scale"]

_CALIBRATE_MODES = ("global_scale", "max", "percentile", "kl_divergence")


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
    """The threshold of every anchor's input and tail (its largest magnitude, a percentile
    of the magnitudes, or the KL-optimal threshold, by ``cfg.calibrate_mode``)."""
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
            samples[n.uid].append(gm.get_output(k).numpy().reshape(-1))
        count += 1
    if not count:
        raise TVMError("relay.quantize.quantize: calibrate_mode "
                       f"{cfg.calibrate_mode!r} needs a dataset of at least one sample")
    values = {uid: np.concatenate(vs) for uid, vs in samples.items()}
    if cfg.calibrate_mode == "max":
        return {uid: float(np.abs(v).max()) for uid, v in values.items()}
    if cfg.calibrate_mode == "kl_divergence":
        return {uid: kl_divergence_scale(v) for uid, v in values.items()}
    return {uid: float(np.percentile(np.abs(v), cfg.percentile)) for uid, v in values.items()}


def _smooth(p: np.ndarray, eps: float = 1e-4) -> np.ndarray | None:
    """``p`` with ``eps`` moved onto its empty bins from the others, so that the KL
    divergence is finite (TVM's ``_smooth_distribution``); None when that leaves a bin
    empty or negative."""
    zeros = p == 0
    n_zeros = int(zeros.sum())
    if n_zeros == p.size:
        return None
    smoothed = np.where(zeros, eps, p - eps * n_zeros / (p.size - n_zeros))
    return smoothed if (smoothed > 0).all() else None


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) of the normalized distributions (``scipy.stats.entropy(p, q)``)."""
    p, q = p / p.sum(), q / q.sum()
    return float(np.dot(p, np.log(p / q)))


def kl_divergence_scale(values: np.ndarray, num_bins: int = 8001,
                        num_quantized_bins: int = 255) -> float:
    """The threshold ``t`` (quantize ``[-t, t]`` onto ``num_quantized_bins`` levels) that
    minimizes the KL divergence between the distribution of ``values`` and its quantized
    form: TVM's ``kl_divergence_scale`` (MXNet's / TensorRT's entropy calibration).

    A histogram of ``values`` over ``[-m, m]`` (``m`` the largest magnitude) in
    ``num_bins`` bins; for each candidate ``t`` (each bin edge past the middle
    ``num_quantized_bins`` bins), the bins within ``[-t, t]`` (the outliers added to the
    two end bins) are ``p``, and ``q`` is the sliced histogram merged into
    ``num_quantized_bins`` groups and spread back evenly over each group's nonempty bins of
    ``p``; both smoothed (:func:`_smooth`), the smallest ``KL(p || q)`` wins."""
    values = np.asarray(values, np.float64).reshape(-1)
    th = float(np.abs(values).max()) if values.size else 0.0
    if th == 0.0:
        return 0.0
    hist, edges = np.histogram(values, bins=num_bins, range=(-th, th))
    hist = hist.astype(np.float64)
    mass = np.concatenate([[0.0], np.cumsum(hist)])  # mass[k]: the bins before k
    zero_bin = num_bins // 2
    best, best_th = np.inf, th
    for i in range(num_quantized_bins // 2, zero_bin + 1):
        start, stop = zero_bin - i, zero_bin + i + 1
        p = hist[start:stop].copy()
        p[0] += mass[start]
        p[-1] += mass[-1] - mass[stop]
        nonzero = p != 0
        # groups of `merged` bins, the last one with the remainder
        merged = p.size // num_quantized_bins
        group = np.minimum(np.arange(p.size) // merged, num_quantized_bins - 1)
        bounds = np.append(merged * np.arange(num_quantized_bins), p.size)
        totals = np.diff(mass[start + bounds])
        norms = np.bincount(group, weights=nonzero, minlength=num_quantized_bins)
        q = np.where(nonzero, (totals / np.maximum(norms, 1))[group], 0.0)
        ps, qs = _smooth(p), _smooth(q)
        if ps is None or qs is None:
            continue
        divergence = _kl(ps, qs)
        if divergence < best:
            best, best_th = divergence, float(edges[stop])
    return best_th


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
