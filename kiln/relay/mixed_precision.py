"""``to_mixed_precision`` (TVM's ``relay.transform.ToMixedPrecision``) for bf16 on CPUs:
the convolutions and dense layers of a float32 graph computed in bfloat16 with float32
accumulation.

The pass rewrites

    conv2d(x, W[, bias])                   (groups == 1, W a constant)  -> conv2d_bf16
    dense(x, W[, bias]), matmul(x, W)      (x [..., K], W a constant)   -> dense_bf16

where the reduction has at least :data:`MIN_REDUCTION` (1024; convolutions that run direct,
``kiln.topi.x86.bf16.is_direct``, :data:`MIN_DIRECT_REDUCTION`, 64; others with a kernel
larger than 1x1 :data:`MIN_SPATIAL_REDUCTION`, 576; dense layers
:data:`MIN_DENSE_REDUCTION`, 768) terms and the shapes are static (the others stay
float32), with ``W`` rounded to bf16 (to nearest even) and packed once, at compile time, in
the layout of the x86 kernel its shape and strides select (``kiln.topi.x86.bf16``: direct
or im2col). Their inputs and outputs stay float32: each kernel rounds its input to bf16 as
it packs it, sums
exact bf16 products in float32 and adds the float32 bias, so everything else (batch norms
folded before, residual adds, relu, pooling, depthwise and grouped convolutions, softmax)
computes in float32 as before. A tensor that only bf16 convolutions read (a ResNet block's
inner activation) is rounded to bf16 once, in the tail of the kernel that computes it
(:func:`bf16_activations`), and stored as bf16; the layout pass then keeps the
activations of chains of direct bf16 convolutions in a blocked layout (:mod:`.bf16_layout`).
Guarantee: each rewritten operator equals the float32 operator on bf16-rounded operands up
to float32 summation error.

Selected by ``relay.build(..., precision="bf16")`` or by the ``PassContext`` key
:data:`CONFIG_KEY` (``"bfloat16"``); it needs a CPU target with AVX-512 BF16, else a
``TVMError`` (no emulation).
"""

from __future__ import annotations

from kiln.errors import TVMError
from kiln.ir.transform import PassContext
from kiln.target import Target
from kiln.topi.x86.bf16 import is_direct, pack_conv2d_weight
from kiln.topi.x86.bf16_intrin import check_bf16_cpu
from kiln.topi.x86.dense_bf16 import pack_dense_weight

from .graph import Graph, Node, call, const
from .transform import rewrite

#: the ``PassContext`` config key selecting the reduced precision (TVM's dtype name)
CONFIG_KEY = "relay.ToMixedPrecision.mixed_precision_type"
#: the shortest reduction (``C x KH x KW``) of a convolution converted: below it the
#: packing stages and the layout changes around a bf16 kernel cost more than the bf16
#: products save (measured, interleaved, 2 threads, the earlier three-stage kernels:
#: MobileNetV2 with every convolution converted ran 2.3x slower than in float32; ResNet-18
#: ran at 0.83x of float32 converting K >= 1024, 0.89x also converting its 56x56 layers,
#: K = 576; one thread, the one-stage kernels: 15.3 ms converting K >= 1024, 15.2 ms
#: K >= 576, 16.6 ms K >= 128; CPU time of one thread with the direct convolutions: 12.0 ms
#: converting K >= 1024, 12.3 ms also converting the 56x56 layers, direct too)
MIN_REDUCTION = 1024
#: the same for convolutions with a kernel larger than 1x1, since the layout pass keeps the
#: activations of direct ones blocked (:mod:`.bf16_layout`): ResNet-18's 56x56 layers and
#: the stride-2 3x3 layer after them (576) pay then (CPU time of one thread, ResNet-18,
#: best of 11 x 5 runs interleaved, two runs: 12.1 and 11.6 ms converting them, 12.7 and
#: 12.0 ms at 1024 before the blocked layout, 13.7 and 12.7 ms at 1024 blocked; 12.8 ms
#: converting only the direct ones, the stride-2 layer then writing bf16 from a float32
#: kernel). Pointwise layers keep :data:`MIN_REDUCTION` (MobileNetV2's 576- and 960-input
#: projections: not measured)
MIN_SPATIAL_REDUCTION = 576
#: the same for convolutions that run direct (``kiln.topi.x86.bf16.is_direct``: input
#: channels a multiple of 32, output channels of 16, any kernel and stride), which read and
#: write the blocked layout with no im2col copy: ResNet's strided and pointwise layers too
#: (CPU time of one thread, median of 7 interleaved runs at load average 11 to 16: ResNet-18
#: 11.1 ms converting them from 64, 12.8 ms with the thresholds above; ResNet-50 24.2 ms
#: against 43.4 ms, float32 70.2 ms)
MIN_DIRECT_REDUCTION = 64
#: the same for dense layers, whose only packing is rounding the ``M x K`` rows, next to
#: ``M x N x K`` products, and no layout change (measured, one thread: a 2-layer BERT-base
#: encoder, seq 128, took 28.6 ms converting only its 3072-input projections, 17.3 ms
#: converting its 768-input ones too, against 35.8 ms in float32)
MIN_DENSE_REDUCTION = 768
#: ``relay.build``'s ``precision`` values -> the config key's value (None: float32)
PRECISIONS: dict[str, str | None] = {"fp32": None, "float32": None, "bf16": "bfloat16",
                                     "bfloat16": "bfloat16"}


def mixed_precision_type(precision: str) -> str | None:
    """The dtype a ``precision`` name (``"fp32"``, ``"bf16"``) computes in, None for fp32."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got "
                         f"{precision!r} (int8: import a quantized ONNX model)")
    return PRECISIONS[precision]


def precision_context(precision: str) -> PassContext:
    """The current ``PassContext`` with :data:`CONFIG_KEY` set for ``precision``."""
    ctx = PassContext.current()
    config = {k: v for k, v in ctx.config.items() if k != CONFIG_KEY}
    dtype = mixed_precision_type(precision)
    if dtype is not None:
        config[CONFIG_KEY] = dtype
    return PassContext(ctx.opt_level, ctx.required_pass, ctx.disabled_pass, config)


def _conv2d(n: Node, xs: list[Node]) -> Node | None:
    w, a = xs[1], n.attrs
    if not w.is_const or w.value.ndim != 4 or a.get("groups", 1) != 1 \
            or a.get("depthwise_layout"):
        return None
    if w.value[0].size < _min_reduction(w.shape, a["strides"]):
        return None
    packed = pack_conv2d_weight(w.value, a["strides"])
    return call("conv2d_bf16", [xs[0], const(packed, f"{n.name}_w_bf16"),
                                *xs[2:]], name=n.name, kernel_size=tuple(w.shape[2:]),
                channels=w.shape[0], strides=a["strides"], padding=a["padding"],
                dilation=a["dilation"])


def _min_reduction(weight_shape: tuple[int, ...], strides) -> int:
    """The shortest reduction of an ``OIHW`` convolution weight converted to bf16."""
    if is_direct(weight_shape, strides):
        return MIN_DIRECT_REDUCTION
    return MIN_SPATIAL_REDUCTION if weight_shape[2:] != (1, 1) else MIN_REDUCTION


def _dense(n: Node, xs: list[Node]) -> Node | None:
    x, w = xs[0], xs[1]
    if not w.is_const or w.value.ndim != 2 or len(x.shape) < 2 \
            or x.shape[-1] < MIN_DENSE_REDUCTION:
        return None
    weight = w.value if n.op == "dense" else w.value.T  # matmul: [K, N]
    return call("dense_bf16", [x, const(pack_dense_weight(weight), f"{n.name}_w_bf16"),
                               *xs[2:]], name=n.name, units=weight.shape[0])


_REWRITES = {"conv2d": _conv2d, "dense": _dense, "matmul": _dense}


def to_mixed_precision(graph: Graph, mixed_precision_type: str = "bfloat16") -> Graph:
    """``graph`` with its convolutions and dense layers computed in ``mixed_precision_type``
    (only ``"bfloat16"``), as the module doc says; the current target's CPU must have
    AVX-512 BF16."""
    if mixed_precision_type != "bfloat16":
        raise NotImplementedError(f"to_mixed_precision: {mixed_precision_type!r} is not "
                                  f"implemented (only 'bfloat16')")
    check_bf16_cpu(what="relay.build(precision='bf16')")

    def fn(n: Node, xs: list[Node]) -> Node | None:
        convert = _REWRITES.get(n.op)
        if convert is None or not n.is_static:  # symbolic dimensions: left float32
            return None
        return convert(n, xs)

    return bf16_activations(rewrite(graph, fn))


#: the bf16 operators that read their data (first input) as bf16 bits as well as float32
BF16_DATA_READERS = ("conv2d_bf16", "dense_bf16")


def _read_as_bf16_data_only(x: Node, readers: list[Node], outputs: set[int]) -> bool:
    """Whether ``x`` (computed, float32, not a graph output) is read only by the operators
    of :data:`BF16_DATA_READERS`, and by them only as their data."""
    return x.dtype == "float32" and not (x.is_const or x.is_input) and x.uid not in outputs \
        and bool(readers) and all(r.op in BF16_DATA_READERS and r.inputs[0] is x
                                  and x not in r.inputs[1:] for r in readers)


def bf16_activations(graph: Graph) -> Graph:
    """``graph`` with each float32 tensor that only bf16 convolutions and dense layers read
    as their data rounded to bf16 once, by a ``bf16_round`` after its producer (fused into
    the producing kernel's tail), and those operators reading the bf16 bits. They would have
    rounded it to the same bits: results are unchanged, the tensor is stored and read at
    half the bytes and rounded once."""
    users = graph.users()
    outputs = {o.uid for o in graph.outputs}
    rounded: dict[int, Node] = {}

    def fn(n: Node, xs: list[Node]) -> Node | None:
        x = n.inputs[0] if n.op in BF16_DATA_READERS else None
        if x is None or not _read_as_bf16_data_only(x, users.get(x.uid, []), outputs):
            return None
        if x.uid not in rounded:
            rounded[x.uid] = call("bf16_round", [xs[0]], name=f"{x.name or x.uid}_bf16")
        return call(n.op, [rounded[x.uid], *xs[1:]], name=n.name, **n.attrs)

    return rewrite(graph, fn)


def apply_configured(graph: Graph, target: Target) -> Graph:
    """``graph`` converted to the precision the current ``PassContext`` names
    (:data:`CONFIG_KEY`), as it is without one; call it under ``with target``."""
    dtype = PassContext.current().config.get(CONFIG_KEY)
    if dtype is None:
        return graph
    if not target.is_cpu:
        raise TVMError(f"precision {dtype!r} compiles for CPU targets only, not "
                       f"{target.kind}")
    return to_mixed_precision(graph, dtype)
