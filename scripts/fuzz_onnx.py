"""Mutation fuzzer for kiln's ONNX importer: every mutated model must give a clear kiln error
or the output onnxruntime gives, never an internal error, a crash or a hang.

Usage (from the repository root)::

    .venv/bin/python scripts/fuzz_onnx.py --count 400 --seed 0 [--jobs 1] [--timeout 60]
                                          [--start 0] [--show [all]]

Mutant ``i`` of seed ``s`` is drawn from ``numpy.random.default_rng([s, i])``: a base model of
``kiln.relay.testing`` (the small single-feature models and ResNet-18 at 32x32) and one
mutation of :data:`MUTATIONS` (attributes of the wrong length, type or value, out-of-range
axes, changed input and initializer dtypes and shapes, dangling, missing or extra inputs, opset
and IR versions, truncated or flipped serialized bytes, random bytes in strings, huge
dimensions, NaN inputs and weights (NaN only: infinities legitimately meet differently
in Winograd and direct convolutions), an appended operator with random attributes). The same
``(seed, i)`` gives the same mutant on every machine.

Each mutant runs in a worker process (reused for the next mutant, restarted when it dies or
exceeds ``--timeout``): onnxruntime (graph optimizations off, so that its fusions do not
change the reference) creates a session and runs it (accepts or rejects), then
kiln imports it (``relay.frontend.from_onnx``), builds it (``relay.build``) and runs it, and
the two outputs are compared when both accept. Outcomes (:data:`OUTCOMES`):

* a kiln error is **clear** when its type is one of kiln's own exception classes (a class
  defined in a ``kiln`` module: ``TVMError`` and its subclasses, the importer's
  ``OnnxImportError`` and ``OpNotImplemented``; not ``CompileError``, a C compiler rejecting
  generated code) and its message names, as a word, the mutated node or value or a node
  downstream of it (for whole-model mutations: the model, its opset or IR version);
* an **unclear error** is a kiln exception class whose message names none of those;
* an **internal error** is any other exception (``ValueError`` from unpacking, numpy's
  ``AxisError``, ``KeyError``, ``UnicodeDecodeError``, ...);
* **crash** (the worker died) and **hang** (it exceeded the timeout) are counted for kiln only
  when onnxruntime had already answered;
* **accepts invalid**: kiln runs a model onnxruntime rejects; **wrong result**: both run it and
  the outputs differ (shapes, dtypes, infinities or values beyond 1e-4 of max|ref|);
  **NaN differs**: they differ only where a NaN is, or on a mutant fed NaNs (operators'
  NaN semantics may differ). onnxruntime's MaxPool answers a NaN by its place in the window
  and kiln's skips it: where the outputs of a model with a MaxPool differ, the reference is
  onnxruntime on the model whose MaxPool inputs have their NaNs replaced by the lowest
  float32 (:func:`skip_nan_in_max_pools`);
* **out of memory**: kiln's ``MemoryError`` on a model onnxruntime could not allocate either.

``tests/relay/test_onnx_fuzz.py`` runs a bounded version in process (:func:`check`).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import multiprocessing.connection
import os
import re
import resource
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

#: base models: name -> builder keyword arguments (resnet18 small enough to build in seconds)
BASES: dict[str, dict] = {
    "conv_bias_relu": {}, "residual_block": {}, "depthwise": {}, "pooling": {},
    "gemm_classifier": {}, "reshape_matmul_concat": {}, "two_branches": {},
    "exported_flatten_pattern": {}, "maxpool_relu": {}, "resnet18": {"hw": 32, "classes": 10},
}

#: outcome -> whether it is a defect of kiln
OUTCOMES: dict[str, bool] = {
    "match": False, "both reject (kiln clear)": False, "kiln rejects (clear), ort runs": False,
    "both accept (not run)": False, "unclear error": True, "internal error": True,
    "accepts invalid": True, "wrong result": True, "NaN differs": True, "crash": True,
    "hang": True, "out of memory": False, "ort crash or hang": False,
}

#: inputs with more elements than this are not allocated: both sides only compile the model
MAX_FEED_ELEMENTS = 1 << 22
#: a worker's address-space limit, so that a huge allocation fails instead of swapping
WORKER_MEMORY_BYTES = 8 << 30


@dataclass
class Mutant:
    """One mutated model: serialized bytes, what was changed and which names a clear error
    may cite; ``fill`` is how the inputs are drawn ("normal", or "nan" with NaNs among them)."""

    index: int
    base: str
    kind: str
    what: str
    names: tuple[str, ...]
    data: bytes
    fill: str = "normal"


@dataclass
class Result:
    """The outcome of one mutant, with the error text that decided it."""

    mutant: Mutant
    outcome: str
    detail: str = ""
    ort: str = field(default="")


# ---- mutations: (model, rng) -> (what, names) or None when the model offers no target ----

def _nodes_with_attrs(m, pred: Callable) -> list:
    return [(n, a) for n in m.graph.node for a in n.attribute if pred(n, a)]


def _consumers(m, value: str) -> tuple[str, ...]:
    """The nodes that read ``value``, directly or through other nodes (an error found
    downstream of a change may rightly name any of them)."""
    values, names = {value}, []
    for n in m.graph.node:  # topological order
        if values.intersection(n.input):
            names.append(n.name)
            values.update(n.output)
    return tuple(names)


def _downstream(m, node) -> tuple[str, ...]:
    """``node``'s name and those of the nodes that read its outputs, directly or not."""
    return (node.name,) + tuple(c for o in node.output for c in _consumers(m, o))


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _set_ints(attr, values) -> None:
    del attr.ints[:]
    attr.ints.extend(int(v) for v in values)


def attr_length(m, rng):
    """An INTS attribute (strides, pads, kernel_shape, dilations, perm) of another length."""
    from onnx import AttributeProto

    cands = _nodes_with_attrs(m, lambda n, a: a.type == AttributeProto.INTS)
    if not cands:
        return None
    n, a = _pick(rng, cands)
    new_len = _pick(rng, [k for k in (0, 1, 3, 5, len(a.ints) + 1, len(a.ints) - 1)
                          if k != len(a.ints) and k >= 0])
    _set_ints(a, (list(a.ints) * 6)[:new_len] if a.ints else [1] * new_len)
    return f"{n.name}.{a.name} of length {new_len}", _downstream(m, n)


def attr_value(m, rng):
    """An INT or INTS attribute set to zero, a negative or a huge value (axes out of range)."""
    from onnx import AttributeProto

    cands = _nodes_with_attrs(m, lambda n, a: a.type in (AttributeProto.INT,
                                                         AttributeProto.INTS))
    if not cands:
        return None
    n, a = _pick(rng, cands)
    v = int(_pick(rng, [0, -1, -2, -5, 4, 5, 7, 1 << 31, 1 << 62, -(1 << 40), 10 ** 9]))
    if a.type == AttributeProto.INT:
        a.i = v
    elif a.ints:
        vals = list(a.ints)
        vals[int(rng.integers(len(vals)))] = v
        _set_ints(a, vals)
    else:
        _set_ints(a, [v])
    return f"{n.name}.{a.name} = {v}", _downstream(m, n)


def attr_type(m, rng):
    """An attribute replaced by one of the same name and another type."""
    from onnx import helper, numpy_helper

    cands = _nodes_with_attrs(m, lambda n, a: True)
    if not cands:
        return None
    n, a = _pick(rng, cands)
    value = _pick(rng, [1.5, "SAME", b"\xff\xfe", [1.0, 2.0], ["a", "b"], 3, [2, 2],
                        numpy_helper.from_array(np.ones(2, np.float32))])
    new = helper.make_attribute(a.name, value)
    a.CopyFrom(new)
    return f"{n.name}.{a.name} as {type(value).__name__}", _downstream(m, n)


def attr_drop(m, rng):
    """An attribute removed (a required one such as kernel_shape or Concat's axis)."""
    cands = _nodes_with_attrs(m, lambda n, a: True)
    if not cands:
        return None
    n, a = _pick(rng, cands)
    n.attribute.remove(a)
    return f"{n.name} without {a.name}", _downstream(m, n)


#: attributes that mutation ``attr_add`` gives to a node (known to some operators only)
_EXTRA_ATTRS = [("auto_pad", "SAME_UPPER"), ("auto_pad", "VALID"), ("auto_pad", "BOGUS"),
                ("group", 2), ("group", 0), ("dilations", [2, 2]), ("ceil_mode", 1),
                ("count_include_pad", 1), ("storage_order", 1), ("keepdims", 0),
                ("transA", 1), ("alpha", 2.0), ("beta", 0.5), ("axis", 9),
                ("allowzero", 1), ("spatial", 0), ("no_such_attribute", 1)]


def attr_add(m, rng):
    """A node given an attribute (a legal option, a bad value or one the operator lacks)."""
    from onnx import helper

    n = _pick(rng, list(m.graph.node))
    name, value = _pick(rng, _EXTRA_ATTRS)
    for a in list(n.attribute):
        if a.name == name:
            n.attribute.remove(a)
    n.attribute.append(helper.make_attribute(name, value))
    return f"{n.name}.{name} = {value!r}", _downstream(m, n)


#: ONNX element types (TensorProto enum values), one out of range
_DTYPES = [11, 10, 7, 6, 2, 9, 8, 16, 0, 12345]  # double f16 i64 i32 u8 bool str bf16 - -


def input_dtype(m, rng):
    """The graph input declared with another element type (double, float16, int, string...)."""
    vi = m.graph.input[0]
    t = int(_pick(rng, _DTYPES))
    vi.type.tensor_type.elem_type = t
    return f"input {vi.name} of element type {t}", (vi.name,) + _consumers(m, vi.name)


def init_dtype(m, rng):
    """An initializer converted to another dtype (float64, float16, integers, bool)."""
    from onnx import numpy_helper

    if not m.graph.initializer:
        return None
    init = _pick(rng, list(m.graph.initializer))
    dt = _pick(rng, ["float64", "float16", "int64", "int32", "uint8", "bool"])
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(dt), init.name))
    return f"initializer {init.name} as {dt}", (init.name,) + _consumers(m, init.name)


def init_corrupt(m, rng):
    """An initializer whose dims, data type or data disagree with its bytes."""
    if not m.graph.initializer:
        return None
    init = _pick(rng, list(m.graph.initializer))
    how = _pick(rng, ["dims", "data_type", "truncate", "negative dim"])
    if how == "dims":
        init.dims.append(3)
    elif how == "data_type":
        init.data_type = int(_pick(rng, [11, 10, 7, 3, 0]))
    elif how == "truncate":
        init.raw_data = init.raw_data[:len(init.raw_data) // 2]
    else:
        init.dims.insert(0, -1)
    return f"initializer {init.name}: {how}", (init.name,) + _consumers(m, init.name)


def init_shape(m, rng):
    """An initializer replaced by a consistent one of another shape (a dim or the rank)."""
    from onnx import numpy_helper

    if not m.graph.initializer:
        return None
    init = _pick(rng, list(m.graph.initializer))
    v = numpy_helper.to_array(init)
    shape = list(v.shape)
    if shape and rng.random() < 0.7:
        k = int(rng.integers(len(shape)))
        shape[k] = int(_pick(rng, [0, 1, shape[k] + 1, 2 * shape[k]]))
    else:
        shape = shape[1:] if shape and rng.random() < 0.5 else [2] + shape
    new = rng.standard_normal(shape).astype(v.dtype) if v.dtype.kind == "f" else \
        np.ones(shape, v.dtype)
    init.CopyFrom(numpy_helper.from_array(new, init.name))
    return f"initializer {init.name} of shape {shape}", (init.name,) + _consumers(m, init.name)


def dangling_input(m, rng):
    """A node reads a value nothing defines."""
    n = _pick(rng, list(m.graph.node))
    k = int(rng.integers(len(n.input)))
    n.input[k] = "no_such_value"
    return f"{n.name} input {k} dangling", _downstream(m, n) + ("no_such_value",)


def drop_input(m, rng):
    """A node loses one of its inputs."""
    n = _pick(rng, [n for n in m.graph.node if n.input])
    k = int(rng.integers(len(n.input)))
    del n.input[k]
    return f"{n.name} without input {k}", _downstream(m, n)


def extra_input(m, rng):
    """A node gets one more input (an existing value, or the empty name)."""
    n = _pick(rng, list(m.graph.node))
    n.input.append(_pick(rng, [m.graph.input[0].name, n.input[0] if n.input else "", ""]))
    return f"{n.name} with {len(n.input)} inputs", _downstream(m, n)


def op_type(m, rng):
    """A node's operator replaced (another real operator, an unknown one, a lower-case name)."""
    n = _pick(rng, list(m.graph.node))
    old = n.op_type
    n.op_type = _pick(rng, ["Relu", "Sigmoid", "Conv", "Add", "Softmax", "Elu", "Gemm",
                            "MatMul", "MaxPool", "Concat", "Flatten", "BatchNormalization",
                            "NoSuchOp", old.lower(), "_binary", "Shape"])
    return f"{n.name}: {old} -> {n.op_type}", _downstream(m, n)


def node_domain(m, rng):
    """A node moved to another operator domain."""
    n = _pick(rng, list(m.graph.node))
    n.domain = _pick(rng, ["com.microsoft", "ai.onnx.ml", "org.example"])
    return f"{n.name} in domain {n.domain}", _downstream(m, n)


def opset(m, rng):
    """The default domain's opset changed (0, negative, old, newer, 99), or removed."""
    v = int(_pick(rng, [0, -1, 1, 5, 6, 7, 9, 10, 11, 12, 14, 17, 18, 21, 99, 1 << 40]))
    if rng.random() < 0.1:
        del m.opset_import[:]
        return "no opset_import", ("opset", "model")
    m.opset_import[0].version = v
    return f"opset {v}", ("opset", "model")


def ir_version(m, rng):
    """The IR version changed."""
    m.ir_version = int(_pick(rng, [0, 1, 2, 3, 99, -1]))
    return f"ir_version {m.ir_version}", ("IR version", "ir_version", "model")


def _all_names(m) -> tuple[str, ...]:
    g = m.graph
    return (("model", "opset") + tuple(n.name for n in g.node) + tuple(
        i.name for i in g.initializer) + tuple(v.name for v in g.input))


def truncate(m, rng):
    """The serialized model cut short."""
    data = m.SerializeToString()
    k = int(rng.integers(len(data)))
    return f"truncated to {k} of {len(data)} bytes", _all_names(m), data[:k]


def flip_bytes(m, rng):
    """A few random bytes of the serialized model changed."""
    data = bytearray(m.SerializeToString())
    for _ in range(int(rng.integers(1, 9))):
        data[int(rng.integers(len(data)))] = int(rng.integers(256))
    return "random bytes changed", _all_names(m), bytes(data)


def string_bytes(m, rng):
    """A string of the model (a node, value, attribute or operator name) overwritten with
    random bytes of the same length, invalid UTF-8 included."""
    g = m.graph
    strings = [n.name for n in g.node] + [n.op_type for n in g.node] + \
        [v.name for v in g.input] + [a.name for n in g.node for a in n.attribute]
    s = _pick(rng, [s for s in strings if len(s) >= 2]).encode()
    noise = bytes(int(b) for b in rng.integers(0, 256, len(s)))
    data = m.SerializeToString().replace(s, noise)
    return f"{s.decode()!r} -> {noise!r}", _all_names(m), data


def huge_dim(m, rng):
    """A dimension of the graph input set to 0, -1, 2^31, 2^40, symbolic, or the rank changed."""
    shape = m.graph.input[0].type.tensor_type.shape
    name = m.graph.input[0].name
    how = _pick(rng, ["value", "symbolic", "add dim", "drop dim"])
    d = _pick(rng, list(shape.dim))
    if how == "value":
        d.dim_value = int(_pick(rng, [0, -1, 1 << 31, 1 << 40, 100_000]))
        what = f"{name} dim {d.dim_value}"
    elif how == "symbolic":
        d.dim_param = "N"
        what = f"{name} dim symbolic"
    elif how == "add dim":
        shape.dim.add().dim_value = 2
        what = f"{name} rank + 1"
    else:
        shape.dim.remove(d)
        what = f"{name} rank - 1"
    return what, (name,) + _consumers(m, name)


def graph_output(m, rng):
    """The graph output renamed to an undefined value, removed, or listed twice."""
    g = m.graph
    how = _pick(rng, ["rename", "remove", "twice"])
    if how == "rename":
        g.output[0].name = "no_such_output"
    elif how == "remove":
        del g.output[:]
    else:
        g.output.add().CopyFrom(g.output[0])
    return f"graph output {how}", ("no_such_output", "output", g.name, "model")


def ssa_violation(m, rng):
    """A node's output renamed to a value that already exists (input, initializer, output)."""
    g = m.graph
    n = _pick(rng, list(g.node))
    names = _downstream(m, n)
    values = [g.input[0].name] + [o for k in g.node for o in k.output if k is not n]
    n.output[0] = _pick(rng, values)
    return f"{n.name} output -> {n.output[0]}", names + (n.output[0],)


def node_order(m, rng):
    """The nodes reversed or shuffled (no longer topologically sorted)."""
    nodes = list(m.graph.node)
    order = rng.permutation(len(nodes)) if rng.random() < 0.5 else range(len(nodes))[::-1]
    del m.graph.node[:]
    m.graph.node.extend(nodes[int(k)] for k in order)
    return "nodes reordered", tuple(n.name for n in nodes) + tuple(
        o for n in nodes for o in n.input)


def nan_input(m, rng):
    """The model as it is, fed NaN among its input values."""
    return "NaN inputs", (m.graph.input[0].name,), None, "nan"


def nan_weight(m, rng):
    """NaN written into a float initializer."""
    from onnx import numpy_helper

    inits = [i for i in m.graph.initializer if i.data_type == 1]
    if not inits:
        return None
    init = _pick(rng, inits)
    v = numpy_helper.to_array(init).copy()
    flat = v.reshape(-1)
    for _ in range(max(1, flat.size // 10)):
        flat[int(rng.integers(flat.size))] = np.nan
    init.CopyFrom(numpy_helper.from_array(v, init.name))
    return f"NaN in {init.name}", (init.name,) + _consumers(m, init.name)


def _axes_value(rng, rank: int) -> int:
    return int(_pick(rng, list(range(-rank, rank)) + [rank, rank + 2, -rank - 1, 99]))


def append_op(m, rng):
    """An operator appended to the graph output, with random (legal or not) attributes and
    constant operands: Softmax, Flatten, Transpose, Concat, Squeeze, Unsqueeze, Slice,
    ReduceMean, Clip, LeakyRelu, Cast, Reshape, Add/Mul/Div by a constant, pooling, ..."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = m.graph
    y, out = g.output[0].name, "fz_out"
    rank = len(g.output[0].type.tensor_type.shape.dim) or 2
    op = _pick(rng, ["Softmax", "Flatten", "Transpose", "Concat", "Squeeze", "Unsqueeze",
                     "Slice", "ReduceMean", "Clip", "LeakyRelu", "Cast", "Reshape", "Add",
                     "Mul", "Div", "MaxPool", "AveragePool", "Identity", "Dropout", "Tanh",
                     "Sigmoid", "Relu", "GlobalAveragePool"])
    inputs, attrs, elem = [y], {}, TensorProto.FLOAT

    def const(value, dtype) -> str:
        name = f"fz_c{len(inputs)}"
        g.initializer.append(numpy_helper.from_array(np.array(value, dtype), name))
        inputs.append(name)
        return name

    if op in ("Softmax", "Flatten", "Concat"):
        attrs["axis"] = _axes_value(rng, rank)
        if op == "Concat":
            inputs.append(y)
    elif op == "Transpose":
        perm = [int(v) for v in rng.permutation(rank)]
        attrs["perm"] = _pick(rng, [perm, perm + [rank], perm[:-1], [0] * rank])
    elif op in ("Squeeze", "Unsqueeze"):
        const([_axes_value(rng, rank + 1) for _ in range(int(rng.integers(1, 3)))], np.int64)
    elif op == "Slice":
        k = int(rng.integers(1, 3))
        for _ in range(3):
            const([int(rng.integers(-4, 5)) for _ in range(k)], np.int64)
        const([_axes_value(rng, rank) for _ in range(k)], np.int64)
        const([int(_pick(rng, [1, 1, 2, -1, 0])) for _ in range(k)], np.int64)
    elif op == "ReduceMean":
        attrs["axes"] = _pick(rng, [[2, 3], [-2, -1], [1], [2, 9], [3, 2]])
        attrs["keepdims"] = int(rng.integers(2))
    elif op == "Clip":
        lo, hi = sorted(rng.standard_normal(2))
        const(_pick(rng, [lo, np.nan, hi]), np.float32)
        const(_pick(rng, [hi, lo, np.inf]), np.float32)
    elif op == "LeakyRelu":
        attrs["alpha"] = float(_pick(rng, [0.1, -1.0, np.nan, 1e30]))
    elif op == "Cast":
        attrs["to"] = elem = int(_pick(rng, [1, 11, 10, 7, 6, 9, 8]))
    elif op == "Reshape":
        const(_pick(rng, [[-1], [1, -1], [0, -1], [-1, -1], [7, -1], [0, 0, 0, 0, 0]]), np.int64)
    elif op in ("Add", "Mul", "Div"):
        shape = _pick(rng, [[], [1], [3], [1, 1, 1, 1, 1], [2, 1, 1, 1]])
        const(rng.standard_normal(shape), _pick(rng, [np.float32, np.float32, np.float64]))
    elif op in ("MaxPool", "AveragePool"):
        attrs["kernel_shape"] = _pick(rng, [[2, 2], [3, 3], [1], [0, 0], [99, 99]])
        attrs["strides"] = _pick(rng, [[1, 1], [2, 2], [0, 1]])
        attrs["pads"] = _pick(rng, [[0, 0, 0, 0], [1, 1, 1, 1], [3, 3, 3, 3]])
    node = helper.make_node(op, inputs, [out], name=f"fz_{op.lower()}", **attrs)
    g.node.append(node)
    g.output[0].name, g.output[0].type.tensor_type.elem_type = out, elem
    try:  # declare the output's shape as onnx infers it, if it can
        inferred = onnx.shape_inference.infer_shapes(m).graph.value_info
        g.output[0].type.CopyFrom(next(v.type for v in inferred if v.name == out))
    except (onnx.shape_inference.InferenceError, StopIteration):
        pass
    return f"appended {op} {attrs} on {inputs}", (node.name,)


#: mutation name -> function(model, rng) -> (what, names[, bytes[, fill]]) or None
MUTATIONS: dict[str, Callable] = {f.__name__: f for f in (
    attr_length, attr_value, attr_type, attr_drop, attr_add, input_dtype, init_dtype,
    init_corrupt, init_shape, dangling_input, drop_input, extra_input, op_type, node_domain,
    opset, ir_version, truncate, flip_bytes, string_bytes, huge_dim, graph_output,
    ssa_violation, node_order, nan_input, nan_weight, append_op, append_op, append_op)}


_BASE_MODELS: dict[str, bytes] = {}


def _base(name: str):
    import onnx

    from kiln.relay import testing

    if name not in _BASE_MODELS:
        _BASE_MODELS[name] = testing.get_model(name, **BASES[name]).SerializeToString()
    return onnx.ModelProto.FromString(_BASE_MODELS[name])


def mutant(index: int, seed: int) -> Mutant:
    """Mutant ``index`` of ``seed``: the same pair gives the same bytes."""
    rng = np.random.default_rng([seed, index])
    base = _pick(rng, list(BASES))
    while True:  # a mutation that finds no target in this model draws another
        kind = _pick(rng, list(MUTATIONS))
        m = _base(base)
        got = MUTATIONS[kind](m, rng)
        if got is not None:
            break
    what, names = got[0], got[1]
    data = got[2] if len(got) > 2 and got[2] is not None else m.SerializeToString()
    fill = got[3] if len(got) > 3 else "normal"
    return Mutant(index, base, kind, what, tuple(s for s in names if s), data, fill)


# ---- running and classifying --------------------------------------------------------------

def feeds(model, fill: str, seed: int) -> dict[str, np.ndarray] | None:
    """Inputs for every graph input that is not an initializer, drawn from its declared
    fixed shape and numeric dtype; None when one cannot be made (symbolic, negative or huge
    dimensions, non-numeric or unknown types)."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (KeyError, TypeError, ValueError):
            return None
        if dtype.kind not in "fiub" or min(dims, default=1) < 0 or \
                np.prod(dims, dtype=np.float64) > MAX_FEED_ELEMENTS:
            return None
        v = rng.standard_normal(dims) * 3
        if fill == "nan":
            v[rng.random(v.shape) < 0.2] = np.nan
        out[vi.name] = v.astype(dtype)
    return out


def run_onnxruntime(data: bytes, inputs) -> list[np.ndarray] | None:
    """onnxruntime's outputs (None: the session was made but not run), its graph
    optimizations off: its fusions change results (Relu then Clip with a NaN bound)."""
    import onnxruntime as ort

    ort.set_default_logger_severity(4)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    return None if inputs is None else sess.run(None, inputs)


def run_kiln(model_or_bytes, inputs) -> list[np.ndarray] | None:
    """kiln's outputs: import, build, run (None: built but not run)."""
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor

    mod, params = relay.frontend.from_onnx(model_or_bytes)
    lib = relay.build(mod, target="llvm", params=params)
    if inputs is None:
        return None
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    for k, v in inputs.items():
        gm.set_input(k, v)
    gm.run()
    return [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]


def skip_nan_in_max_pools(model) -> bytes | None:
    """``model`` with the input ``x`` of each MaxPool made ``Where(IsNaN(x), lowest float32,
    x)`` (None: it has no MaxPool), so that onnxruntime's MaxPool meets no NaN. Its MaxPool
    answers a NaN by its place in the window, not always NaN nor the maximum ([5, 1, NaN, 2]
    gives 2); kiln's skips NaN (topi.nn.pooling), which this rewritten model computes."""
    import onnx
    from onnx import helper, numpy_helper

    def is_max_pool(n) -> bool:
        return n.op_type == "MaxPool" and n.domain in ("", "ai.onnx") and len(n.input) > 0

    if not any(is_max_pool(n) for n in model.graph.node):
        return None
    lowest = "fuzz_lowest"
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.initializer.append(numpy_helper.from_array(np.float32(np.finfo(np.float32).min),
                                                       lowest))
    nodes, replaced = [], {}  # replaced: x -> the name of x with its NaNs replaced
    for original in model.graph.node:
        n = onnx.NodeProto()
        n.CopyFrom(original)
        x = n.input[0] if is_max_pool(n) else None
        if x is not None and x not in replaced:
            replaced[x] = f"{x}_fuzz_skip_nan"
            nodes += [helper.make_node("IsNaN", [x], [f"{x}_fuzz_isnan"]),
                      helper.make_node("Where", [f"{x}_fuzz_isnan", lowest, x], [replaced[x]])]
        if x is not None:
            n.input[0] = replaced[x]
        nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m.SerializeToString()


def _parse(data: bytes):
    """The ModelProto in ``data`` (what ``onnx.load`` would give a user), or the bytes
    themselves when they do not parse."""
    import onnx

    try:
        return onnx.ModelProto.FromString(data)
    except Exception:  # noqa: BLE001 (protobuf's DecodeError, whatever its module)
        return data


def compare(ys, refs) -> tuple[str, str]:
    """The outcome of kiln's outputs ``ys`` against onnxruntime's ``refs`` ("match", "wrong
    result" or "NaN differs") and why."""
    if len(ys) != len(refs):
        return "wrong result", f"{len(ys)} outputs, onnxruntime {len(refs)}"
    nan_differs = ""
    for k, (y, r) in enumerate(zip(ys, refs, strict=True)):
        r = np.asarray(r)
        if y.shape != r.shape or y.dtype != r.dtype:
            return "wrong result", (f"output {k}: {y.dtype}{list(y.shape)}, onnxruntime "
                                    f"{r.dtype}{list(r.shape)}")
        if r.dtype.kind != "f":
            if not np.array_equal(y, r):
                return "wrong result", f"output {k}: values differ"
            continue
        both = ~(np.isnan(y) | np.isnan(r))
        if not np.array_equal(np.isnan(y), np.isnan(r)):
            nan_differs = (f"output {k}: {int(np.isnan(y).sum())} NaN, onnxruntime "
                           f"{int(np.isnan(r).sum())}")
        fin = both & np.isfinite(r)
        if not np.array_equal(y[both & ~fin], r[both & ~fin]):
            return "wrong result", f"output {k}: infinities differ"
        scale = float(np.abs(r[fin]).max()) if fin.any() else 0.0
        err = float(np.abs(y[fin].astype(np.float64) - r[fin]).max()) if fin.any() else 0.0
        if err > 1e-4 * max(scale, 1.0):
            return "wrong result", f"output {k}: max abs difference {err:.3g} (max |ref| " \
                                   f"{scale:.3g})"
    return ("NaN differs", nan_differs) if nan_differs else ("match", "")


def kiln_error_outcome(e: BaseException, names) -> str:
    """'clear', 'unclear' or 'internal' for an exception kiln raised on a mutant whose
    defect ``names`` would identify (see the module docstring). A C compiler's failure on
    generated code is internal whatever it prints."""
    from kiln.errors import CompileError

    if not type(e).__module__.startswith("kiln") or isinstance(e, CompileError):
        return "internal"
    msg = str(e)
    named = any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", msg, re.IGNORECASE if n in (
        "model", "opset") else 0) for n in names)
    return "clear" if named else "unclear"


def _one_line(e: BaseException) -> str:
    return f"{type(e).__module__}.{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def check(mut: Mutant, report: Callable[[str], None] = lambda stage: None) -> Result:
    """Run ``mut`` through onnxruntime then kiln and classify it; ``report("ort")`` is
    called once onnxruntime has answered (a worker tells its parent then)."""
    model = _parse(mut.data)
    inputs = feeds(model, mut.fill, mut.index) if not isinstance(model, bytes) else None
    try:
        refs = run_onnxruntime(mut.data, inputs)
        ort = ""
    except Exception as e:  # noqa: BLE001 (onnxruntime's errors have no common base)
        refs, ort = None, _one_line(e)
    report("ort")
    try:
        ys = run_kiln(model, inputs)
    except MemoryError as e:
        return Result(mut, "out of memory" if ort else "internal error", _one_line(e), ort)
    except Exception as e:  # noqa: BLE001 (classifying every exception is the point)
        kind = kiln_error_outcome(e, mut.names)
        if kind == "clear":
            return Result(mut, "both reject (kiln clear)" if ort else
                          "kiln rejects (clear), ort runs", _one_line(e), ort)
        return Result(mut, f"{kind} error", _one_line(e), ort)
    if ort:
        return Result(mut, "accepts invalid", "", ort)
    if ys is None or refs is None:
        return Result(mut, "both accept (not run)")
    outcome, why = compare(ys, refs)
    skip_nan = skip_nan_in_max_pools(model) if outcome != "match" else None
    if skip_nan is not None:
        try:
            outcome, why = compare(ys, run_onnxruntime(skip_nan, inputs))
        except Exception:  # noqa: BLE001, S110 (an opset without IsNaN: keep the first answer)
            pass
    if outcome == "wrong result" and mut.kind in ("nan_input", "nan_weight"):
        outcome = "NaN differs"  # a NaN met by operators of other NaN semantics
    return Result(mut, outcome, why)


# ---- worker processes ---------------------------------------------------------------------

def _worker(conn, seed: int) -> None:
    """Serve mutant indices from ``conn``: send ("ort", i) then ("done", Result)."""
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    while True:
        i = conn.recv()
        mut = mutant(i, seed)
        res = check(mut, lambda stage, i=i: conn.send(("ort", i)))
        res.mutant.data = b""  # the parent rebuilds it when it needs it
        conn.send(("done", res))


class _Pool:
    """Worker processes that each run one mutant at a time, restarted after a crash or a
    timeout."""

    def __init__(self, jobs: int, seed: int, timeout: float) -> None:
        self.ctx = mp.get_context("spawn")
        self.seed, self.timeout = seed, timeout
        self.procs: list = [None] * jobs

    def _start(self, k: int):
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=_worker, args=(child, self.seed), daemon=True)
        p.start()
        child.close()
        self.procs[k] = (p, parent)
        return self.procs[k]

    def _stop(self, k: int) -> None:
        p, conn = self.procs[k]
        p.kill()
        p.join()
        conn.close()
        self.procs[k] = None

    def run(self, indices: list[int], on_result: Callable[[Result], None]) -> None:
        import time

        pending = list(indices)
        busy: dict[int, tuple[int, float, bool]] = {}  # slot -> (index, start, ort answered)
        while pending or busy:
            for k in range(len(self.procs)):
                if k not in busy and pending:
                    _, conn = self.procs[k] or self._start(k)
                    i = pending.pop(0)
                    conn.send(i)
                    busy[k] = (i, time.monotonic(), False)
            conns = {self.procs[k][1]: k for k in busy}
            for conn in mp.connection.wait(list(conns), timeout=1.0):
                k = conns[conn]
                i, t0, ort_done = busy[k]
                try:
                    msg, payload = conn.recv()
                except (EOFError, OSError):
                    code = self.procs[k][0].exitcode
                    self._stop(k)
                    del busy[k]
                    on_result(Result(mutant(i, self.seed), "crash" if ort_done else
                                     "ort crash or hang", f"worker exit code {code}"))
                    continue
                if msg == "ort":
                    busy[k] = (i, t0, True)
                else:
                    del busy[k]
                    payload.mutant = mutant(i, self.seed)
                    on_result(payload)
            for k, (i, t0, ort_done) in list(busy.items()):
                if time.monotonic() - t0 > self.timeout:
                    self._stop(k)
                    del busy[k]
                    on_result(Result(mutant(i, self.seed), "hang" if ort_done else
                                     "ort crash or hang", f"over {self.timeout:.0f} s"))
        for k in range(len(self.procs)):
            if self.procs[k] is not None:
                self._stop(k)


def table(results: list[Result]) -> list[str]:
    """The outcome table, then the defects' counts by mutation."""
    by = Counter(r.outcome for r in results)
    lines = [f"{'outcome':34} {'count':>6}  defect"]
    lines += [f"{o:34} {by.get(o, 0):6d}  {'yes' if bad else ''}" for o, bad in OUTCOMES.items()]
    bad = [r for r in results if OUTCOMES[r.outcome]]
    lines.append(f"{'total':34} {len(results):6d}  ({len(bad)} defects)")
    kinds = Counter((r.mutant.kind, r.outcome) for r in bad)
    if kinds:
        lines.append("defects by mutation: " + ", ".join(f"{k} {o}: {c}" for (k, o), c in
                                                          sorted(kinds.items())))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=400, help="number of mutants")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first mutant index")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per mutant")
    ap.add_argument("--show", nargs="?", const="defects", choices=["defects", "all"],
                    help="print each defect (or every mutant) with the errors")
    args = ap.parse_args(argv)
    results: list[Result] = []

    def on_result(r: Result) -> None:
        results.append(r)
        if args.show == "all" or args.show and OUTCOMES[r.outcome]:
            m = r.mutant
            print(f"[{m.index}] {r.outcome}: {m.base} / {m.kind}: {m.what}\n    kiln: "
                  f"{r.detail}\n    ort: {r.ort}", flush=True)

    with tempfile.TemporaryDirectory(prefix="kiln-fuzz-cache-") as cache:
        # the mutants' kernels stay out of the user's compile cache
        os.environ.setdefault("KILN_CACHE_DIR", cache)
        _Pool(args.jobs, args.seed, args.timeout).run(
            list(range(args.start, args.start + args.count)), on_result)
    print(f"ONNX importer fuzz: {args.count} mutants from index {args.start}, seed {args.seed}")
    print("\n".join(table(results)))
    return 1 if any(OUTCOMES[r.outcome] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
