"""AutoTVM templates of the x86 kernels a graph spends its time in: ``conv2d_NCHWc``,
``depthwise_conv2d_NCHWc``, ``dense`` and ``dense_pack``.

Each template's knobs are the parameters of the hand schedule (:func:`.conv2d.nchwc_plan`,
:func:`.dense.dot_plan_params`), so the hand schedule is one point of the space and the
*fallback* config (nothing tuned) is exactly the hand schedule: tuning can find faster
configs, never lose the one kiln already had.

* ``conv2d_NCHWc.x86`` / ``depthwise_conv2d_NCHWc.x86``: ``tile_ow`` (output pixels per
  register tile), ``tile_oc`` (output-channel blocks per register tile), ``parallel_axis``
  (rows ``y`` or channel blocks ``oc`` outermost and parallel), ``inline_pad`` (padding
  read masked inside the kernel instead of a separate padding pass) and, for dense
  convolutions only, ``unroll_ic`` (split and unroll of the input-channel block) and
  ``pixels_outer`` (the tile's loop order: pixels outside the channel blocks).
* ``dense.x86``: ``tile_m`` x ``tile_n`` register block of vector partial sums and
  ``tile_k`` (the vector slice of the reduction) of the rfactor (dot) plan.
* ``dense_pack.x86``: the register block of the packed dense
  (:func:`.packed_dense.dense_pack_plan`): ``tile_m`` rows (the divisors of the hand
  block, which every padded row count is a multiple of), ``tile_n`` columns (whole vectors
  of the target dividing the packed panel), ``parallel_axis`` (panels ``columns`` or row
  blocks ``rows`` outermost and parallel).

The ``schedule_*_cfg(cfg, outs)`` functions schedule a fused group (the anchor followed by
its elementwise epilogue: bias, residual add, relu) with a config; the templates schedule
the anchor alone, which is what a tuning task measures (as in TVM, the epilogue does not
change which config is best).
"""

from __future__ import annotations

from kiln import autotvm, te
from kiln.autotvm.task.space import OtherOptionEntity

from .. import nn
from ..utils import as_list, get_const_tuple
from ._common import find_anchor
from .conv2d import nchwc_plan, schedule_conv_nchwc_block
from .dense import _dot_plan, dot_plan_params, schedule_dense
from .injective import anchored_schedule
from .packed_dense import (
    HeadLayout,
    dense_pack_plan,
    schedule_dense_pack,
    schedule_dense_pack_block,
)
from .packed_dense import dense_pack as dense_pack_compute

CONV2D_NCHWC = "conv2d_NCHWc.x86"
DEPTHWISE_NCHWC = "depthwise_conv2d_NCHWc.x86"
DENSE = "dense.x86"
DENSE_PACK = "dense_pack.x86"

#: the graph operator (kiln.relay op name) each template tunes
TEMPLATE_OF_OP = {"conv2d_NCHWc": CONV2D_NCHWC, "depthwise_conv2d_NCHWc": DEPTHWISE_NCHWC,
                  "dense": DENSE, "dense_pack": DENSE_PACK}

#: knob name -> key of the hand schedule's plan dict
_NCHWC_KNOBS = (("tile_ow", "rw"), ("tile_oc", "vo"), ("parallel_axis", "par"),
                ("unroll_ic", "ku"), ("pixels_outer", "pixels_outer"),
                ("inline_pad", "inline_pad"))
_DENSE_KNOBS = (("tile_m", "mb"), ("tile_n", "nb"), ("tile_k", "kv"))
_DENSE_PACK_KNOBS = (("tile_m", "mb"), ("tile_n", "nb"), ("parallel_axis", "parallel"))


def _with(hand, values) -> list:
    """The candidate values, the hand schedule's among them (sorted, no duplicates)."""
    return sorted(set(values) | {hand}, key=lambda v: (str(type(v)), v))


def _divisors_upto(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _preset_fallback(cfg, knobs, hand: dict) -> None:
    """Make a fallback config name the hand schedule's choices (what it runs)."""
    if cfg.is_fallback:
        for knob, key in knobs:
            if knob in cfg:
                cfg[knob] = OtherOptionEntity(hand[key])


# ---------------------------------------------------------------------------------------
# packed convolutions
# ---------------------------------------------------------------------------------------
def define_nchwc_space(cfg, conv) -> dict:
    """Define the knobs of packed convolution ``conv`` on ``cfg`` and return the plan
    (``rw``, ``vo``, ``par``, ``ku``, ``pixels_outer``, ``inline_pad``) the config
    chooses; a fallback config returns the hand plan itself."""
    hand = dict(nchwc_plan(conv))
    hand.setdefault("ku", 1)
    hand.setdefault("inline_pad", False)
    hand.setdefault("pixels_outer", False)
    _, occ, _, ow, _ = get_const_tuple(conv.output(0).shape)
    depthwise = conv.tag.startswith("depthwise")
    cfg.define_knob("tile_ow", _with(hand["rw"], _divisors_upto(ow, 16)))
    cfg.define_knob("tile_oc", _with(hand["vo"], [v for v in (1, 2, 4) if occ % v == 0]))
    cfg.define_knob("parallel_axis", _with(hand["par"], ["y", "oc"]))
    if not depthwise:
        icb = get_const_tuple(conv.input_tensors[1].shape)[4]
        cfg.define_knob("unroll_ic", _with(hand["ku"], [u for u in (1, 2, 4) if icb % u == 0]))
        cfg.define_knob("pixels_outer", [False, True])
    cfg.define_knob("inline_pad", [False, True])
    if cfg.is_fallback:
        _preset_fallback(cfg, _NCHWC_KNOBS, hand)
        return hand
    plan = dict(hand)
    for knob, key in _NCHWC_KNOBS:
        if knob in cfg:
            plan[key] = cfg[knob].val
    return plan


def _schedule_nchwc_cfg(cfg, outs, tag: str):
    s, outs, conv = anchored_schedule(outs, (tag,))
    if conv is None:
        return s
    plan = define_nchwc_space(cfg, conv)
    schedule_conv_nchwc_block(s, outs, conv, plan)
    return s


def schedule_conv2d_NCHWc_cfg(cfg, outs):  # noqa: N802
    """conv2d_NCHWc (with its fused epilogue) scheduled by ``cfg``."""
    return _schedule_nchwc_cfg(cfg, outs, "conv2d_NCHWc")


def schedule_depthwise_conv2d_NCHWc_cfg(cfg, outs):  # noqa: N802
    """depthwise_conv2d_NCHWc (with its fused epilogue) scheduled by ``cfg``."""
    return _schedule_nchwc_cfg(cfg, outs, "depthwise_conv2d_NCHWc")


def _conv_flop(out, kernel, depthwise: bool) -> float:
    n, occ, oh, ow, ob = get_const_tuple(out.shape)
    kshape = get_const_tuple(kernel.shape)
    per_out = kshape[2] * kshape[3] * (1 if depthwise else kshape[1] * kshape[4])
    return 2.0 * n * occ * oh * ow * ob * per_out


@autotvm.template(CONV2D_NCHWC)
def conv2d_NCHWc(data, kernel, strides, padding, dilation, out_dtype):  # noqa: N802
    """Template: ``topi.nn.conv2d_NCHWc`` with the x86 packed-convolution schedule."""
    out = nn.conv2d_NCHWc(data, kernel, strides, padding, dilation, out_dtype=out_dtype)
    cfg = autotvm.get_config()
    s = schedule_conv2d_NCHWc_cfg(cfg, [out])
    cfg.add_flop(_conv_flop(out, kernel, False))
    return s, [data, kernel, out]


@autotvm.template(DEPTHWISE_NCHWC)
def depthwise_conv2d_NCHWc(data, kernel, strides, padding, dilation, out_dtype):  # noqa: N802
    """Template: ``topi.nn.depthwise_conv2d_NCHWc`` with the x86 packed schedule."""
    out = nn.depthwise_conv2d_NCHWc(data, kernel, strides, padding, dilation,
                                    out_dtype=out_dtype)
    cfg = autotvm.get_config()
    s = schedule_depthwise_conv2d_NCHWc_cfg(cfg, [out])
    cfg.add_flop(_conv_flop(out, kernel, True))
    return s, [data, kernel, out]


# ---------------------------------------------------------------------------------------
# dense
# ---------------------------------------------------------------------------------------
def define_dense_space(cfg, op) -> dict | None:
    """Define the knobs of the dot plan of dense ``op``; returns the chosen ``mb``, ``nb``,
    ``kv`` (the hand values for a fallback config), or None when the dot plan does not apply
    (the reduction is not a multiple of 4: the hand schedule is used, no knobs)."""
    hand = dot_plan_params(op)
    if hand is None:
        return None
    m, n = get_const_tuple(op.output(0).shape)[-2:]
    k = get_const_tuple(op.input_tensors[0].shape)[-1]
    cfg.define_knob("tile_m", _with(hand["mb"], _divisors_upto(m, 8)))
    cfg.define_knob("tile_n", _with(hand["nb"], _divisors_upto(n, 16)))
    cfg.define_knob("tile_k", _with(hand["kv"], [v for v in (4, 8, 16, 32) if k % v == 0]))
    if cfg.is_fallback:
        _preset_fallback(cfg, _DENSE_KNOBS, hand)
        return hand
    return {key: cfg[knob].val for knob, key in _DENSE_KNOBS}


def schedule_dense_cfg(cfg, outs):
    """dense (with its fused bias / epilogue) scheduled by ``cfg``."""
    outs = as_list(outs)
    op = find_anchor(outs, ("dense",))
    if op is None or dot_plan_params(op) is None:
        return schedule_dense(outs)
    s = te.create_schedule([t.op for t in outs])
    params = define_dense_space(cfg, op)
    if not _dot_plan(s, outs, op, params):
        return schedule_dense(outs)
    return s


@autotvm.template(DENSE)
def dense(data, weight, out_dtype):
    """Template: ``topi.nn.dense`` (weight ``[N, K]``) with the x86 dot plan."""
    out = nn.dense(data, weight, out_dtype=out_dtype)
    cfg = autotvm.get_config()
    s = schedule_dense_cfg(cfg, [out])
    m, kd = get_const_tuple(data.shape)
    cfg.add_flop(2.0 * m * kd * get_const_tuple(weight.shape)[0])
    return s, [data, weight, out]


# ---------------------------------------------------------------------------------------
# packed dense
# ---------------------------------------------------------------------------------------
def define_dense_pack_space(cfg, op) -> dict:
    """Define the knobs of the register block of packed dense ``op``; returns the plan of
    :func:`.packed_dense.schedule_dense_pack_block` (the hand plan for a fallback config)."""
    hand = dense_pack_plan(op)
    width = hand["nb"] // hand["vo"]
    cfg.define_knob("tile_m", _divisors_upto(hand["mb"], hand["mb"]))
    cfg.define_knob("tile_n", [width * v for v in _divisors_upto(hand["vo"], hand["vo"])])
    cfg.define_knob("parallel_axis", _with(hand["parallel"], ["columns", "rows"]))
    if cfg.is_fallback:
        _preset_fallback(cfg, _DENSE_PACK_KNOBS, hand)
        return hand
    nb = cfg["tile_n"].val
    return {"mb": cfg["tile_m"].val, "nb": nb, "vo": nb // width,
            "parallel": cfg["parallel_axis"].val}


def schedule_dense_pack_cfg(cfg, outs):
    """dense_pack (with its fused bias / epilogue) scheduled by ``cfg``."""
    outs = as_list(outs)
    op = find_anchor(outs, ("dense_pack",))
    if op is None:
        return schedule_dense_pack(outs)
    s = te.create_schedule([t.op for t in outs])
    schedule_dense_pack_block(s, outs, op, define_dense_pack_space(cfg, op))
    return s


@autotvm.template(DENSE_PACK)
def dense_pack(data, packed_weight, units, data_layout, out_layout, out_dtype):
    """Template: ``topi.x86.dense_pack`` (the weight packed ``[N/nb, K, nb]``; the data
    or the result in a head layout when given, as relay attributes) with its register
    block's knobs."""
    out = dense_pack_compute(data, packed_weight, units=units, out_dtype=out_dtype,
                             data_layout=data_layout, out_layout=out_layout)
    cfg = autotvm.get_config()
    s = schedule_dense_pack_cfg(cfg, [out])
    layout = HeadLayout.of(data_layout)
    rows = layout.matrix_shape[0] if layout else get_const_tuple(data.shape)[0]
    cfg.add_flop(2.0 * rows * get_const_tuple(packed_weight.shape)[1] * units)
    return s, [data, packed_weight, out]


#: template name -> the function scheduling a fused group with a config
SCHEDULE_CFG = {CONV2D_NCHWC: schedule_conv2d_NCHWc_cfg,
                DEPTHWISE_NCHWC: schedule_depthwise_conv2d_NCHWc_cfg,
                DENSE: schedule_dense_cfg, DENSE_PACK: schedule_dense_pack_cfg}

__all__ = ["CONV2D_NCHWC", "DEPTHWISE_NCHWC", "DENSE", "DENSE_PACK", "TEMPLATE_OF_OP",
           "SCHEDULE_CFG", "conv2d_NCHWc", "depthwise_conv2d_NCHWc", "dense", "dense_pack",
           "define_nchwc_space", "define_dense_space", "define_dense_pack_space",
           "schedule_conv2d_NCHWc_cfg", "schedule_depthwise_conv2d_NCHWc_cfg",
           "schedule_dense_cfg", "schedule_dense_pack_cfg"]
