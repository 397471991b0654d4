"""The ONNX importer's boundary: a model ``from_onnx`` accepts is a valid ONNX model that kiln
can compile; anything else fails here with a kiln error that names the part at fault.

* :func:`load` takes an ``onnx.ModelProto`` or its serialized bytes;
* :func:`check_model` runs the ONNX checker and ONNX's strict type and shape inference (the
  rules of the ONNX specification that onnxruntime enforces too: operand types, attribute
  sizes and values, axes in range, broadcastable shapes, topological order), then kiln's
  model-level rules: an opset kiln converts, at least one graph output. Like onnxruntime,
  it does not hold the model to the shapes it declares for its outputs and intermediate
  values (kiln infers them from the inputs). The checker's verdict on a valid model is
  remembered for the process under the model's fingerprint (everything but the bytes of its
  large initializers, whose lengths it includes: the checker reads no more of them), so a
  model imported again is not serialized with its weights again;
* :func:`input_type` reads a graph input's shape and dtype, rejecting unknown element types
  and zero or negative dimensions; a symbolic dimension (``dim_param``) becomes a ``te.var``;
* :func:`check_missing_inputs` rejects inputs left out that are not optional, and
  :func:`check_operand_dtypes` computed operands of a dtype kiln's kernels do not
  take (float32 for arithmetic and NN operators; data-movement operators take more);
* converters validate their attributes and operands with :func:`axis`, :func:`int_list`
  and :func:`scalar`.

Two error classes: :class:`OnnxImportError` for a model that is not valid ONNX (or not
consistent with the ``shape=`` it is imported with) and :class:`OpNotImplemented` for a valid
model beyond what kiln converts. Converters raise them without the node's name; the importer
adds the node's name, operator and inputs.
"""

from __future__ import annotations

import hashlib

import numpy as np

from kiln.errors import TVMError
from kiln.ir.expr import Var


class OnnxImportError(TVMError, ValueError):
    """The ONNX model is not valid ONNX, or not consistent with the ``shape=`` it is imported
    with."""


class OpNotImplemented(NotImplementedError):
    """An ONNX operator (or an operand dtype, attribute value) kiln cannot convert."""


#: the oldest default-domain opset kiln converts (the oldest onnxruntime guarantees);
#: the newest is the installed onnx package's, whose operator schemas check the model
MIN_OPSET = 7

#: dtypes of the tensors kiln's data-movement kernels (reshape, transpose, concat, slice)
#: take; every other operator computes in float32 only
DATA_DTYPES = ("float32", "float64", "float16", "int64", "int32", "uint8", "bool")

#: ONNX operators and the dtypes of their computed operands kiln compiles (``None``: any
#: dtype, the operator only passes its input on or reads its shape)
_OPERAND_DTYPES: dict[str, tuple[str, ...] | None] = {
    "Reshape": DATA_DTYPES, "Flatten": DATA_DTYPES, "Transpose": DATA_DTYPES,
    "Concat": DATA_DTYPES, "Slice": DATA_DTYPES, "Squeeze": DATA_DTYPES,
    "Unsqueeze": DATA_DTYPES, "Identity": None, "Dropout": None, "Shape": None, "Cast": None,
    "Expand": DATA_DTYPES, "Split": DATA_DTYPES, "Gather": DATA_DTYPES, "Equal": DATA_DTYPES,
    "Where": DATA_DTYPES,
    **dict.fromkeys(("And", "Or", "Xor", "Not"), ("bool",)),
    **dict.fromkeys(("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"),
                    ("int64", "int32", "uint8")),
    "BitShift": ("uint8",),
    "DequantizeLinear": ("int8", "uint8", "int32"), "QLinearConv": ("int8", "uint8"),
    "QLinearMatMul": ("int8", "uint8"),
}


def load(model):
    """``model`` as an ``onnx.ModelProto``: a ModelProto, or bytes that parse as one."""
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(model, bytes | bytearray | memoryview):
        try:
            return onnx.load_model_from_string(bytes(model))
        except DecodeError as e:
            raise OnnxImportError(f"not a valid ONNX model: {len(model)} bytes that do not "
                                  f"parse as an onnx.ModelProto ({e})") from None
    if not isinstance(model, onnx.ModelProto):
        raise OnnxImportError(f"from_onnx expects an onnx.ModelProto or its serialized bytes, "
                              f"got {type(model).__name__}")
    return model


def check_model(model) -> int:
    """Validate ``model`` as the module docstring says; returns its default-domain opset."""
    import onnx

    try:
        light, fingerprint = _without_payloads(model)
        if fingerprint not in _CHECKED:
            onnx.checker.check_model(model)
        _check_names_are_text(model.graph)
        for vi in list(model.graph.input) + list(model.graph.output):
            _dtype(vi)
        onnx.shape_inference.infer_shapes(_for_inference(light), check_type=True,
                                          strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise OnnxImportError(f"malformed ONNX model: {e}") from None
    except UnicodeDecodeError:  # the checker's message quotes a name that is not UTF-8
        raise OnnxImportError("malformed ONNX model: a name, operator type or attribute name "
                              "is not valid UTF-8") from None
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if len(versions) != 1:
        raise OnnxImportError(f"malformed ONNX model: it imports the default operator set "
                              f"{len(versions)} times (opset_import), expected once")
    newest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= versions[0] <= newest:
        raise OpNotImplemented(f"the model's opset {versions[0]} is not supported: kiln "
                               f"imports opsets {MIN_OPSET} to {newest}")
    if not model.graph.output:
        raise OnnxImportError("malformed ONNX model: the graph has no outputs")
    _CHECKED.add(fingerprint)
    return versions[0]


#: initializers of more bytes are given to shape inference without their data (weights:
#: inference reads their type and dims; only small ones, shape operands, are read as data)
_INFERENCE_DATA_BYTES = 4096

#: fingerprints (:func:`_without_payloads`) of the models this process found valid
_CHECKED: set[bytes] = set()


def _check_names_are_text(graph) -> None:
    """Reject names that are not UTF-8: protobuf hands them over as ``bytes``, which the
    checker accepts."""
    for k, node in enumerate(graph.node):
        for what, value in [("a name", node.name), ("an operator type", node.op_type),
                            *(("an input", i) for i in node.input),
                            *(("an output", o) for o in node.output)]:
            if isinstance(value, bytes):
                raise OnnxImportError(f"malformed ONNX model: node {k} ({node.op_type!r}) has "
                                      f"{what} {value!r} that is not valid UTF-8")
    named = [*graph.input, *graph.output, *graph.initializer, *graph.value_info]
    for item in named:
        if isinstance(item.name, bytes):
            raise OnnxImportError(f"malformed ONNX model: the graph name {item.name!r} is not "
                                  "valid UTF-8")


def _without_payloads(model):
    """A copy of ``model`` without the bytes of its large initializers (ResNet-18: 14 ms, where
    ``CopyFrom`` took 21 ms and the checker 90 ms), and the model's fingerprint: a digest of
    that copy and of the lengths of the bytes left out."""
    import onnx

    light = onnx.ModelProto()
    _copy_fields(model, light, skip="graph")
    _copy_fields(model.graph, light.graph, skip="initializer")
    lengths = []
    for init in model.graph.initializer:
        raw = init.raw_data
        if len(raw) > _INFERENCE_DATA_BYTES:
            _copy_fields(init, light.graph.initializer.add(), skip="raw_data")
            lengths.append(len(raw))
        else:
            light.graph.initializer.add().CopyFrom(init)
    digest = hashlib.blake2b(light.SerializeToString(deterministic=True), digest_size=20)
    digest.update(np.array(lengths, dtype=np.int64).tobytes())
    return light, digest.digest()


def _copy_fields(src, dst, skip: str) -> None:
    """Copy the fields set in protobuf (proto2) message ``src`` but ``skip`` into ``dst`` (same
    type). Not ``ListFields``, which would copy the bytes of ``skip`` too."""
    for fd in src.DESCRIPTOR.fields:
        if fd.name == skip:
            continue
        if _is_repeated(fd):
            getattr(dst, fd.name).extend(getattr(src, fd.name))
        elif src.HasField(fd.name) and fd.type == fd.TYPE_MESSAGE:
            getattr(dst, fd.name).CopyFrom(getattr(src, fd.name))
        elif src.HasField(fd.name):
            setattr(dst, fd.name, getattr(src, fd.name))


def _is_repeated(fd) -> bool:
    """Whether field descriptor ``fd`` is repeated (protobuf 7 has ``is_repeated`` only,
    protobuf before 5.28 ``label`` only)."""
    return fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED


def _for_inference(light):
    """``light`` (:func:`_without_payloads`, changed in place) for strict inference: without
    the shapes the model declares for graph outputs and intermediate values, so that the
    operators' constraints are checked, not stale declarations."""
    del light.graph.value_info[:]
    for o in light.graph.output:
        if o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")
    return light


def _dtype(vi) -> str:
    """The numpy dtype name of graph input or output ``vi``'s element type."""
    import onnx

    elem = vi.type.tensor_type.elem_type
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)).name
    except KeyError:  # 0 (UNDEFINED) or not a TensorProto.DataType
        raise OnnxImportError(f"malformed ONNX model: graph input or output {vi.name!r} has "
                              f"element type {elem}, which is not an ONNX tensor "
                              f"type") from None


def input_type(vi, shape: tuple[int, ...] | None, dims: dict[str, Var] | None = None
               ) -> tuple[tuple[int | Var, ...], str]:
    """Shape and dtype of graph input ``vi`` (a ValueInfoProto); ``shape`` replaces the
    model's shape (``from_onnx(shape=...)``). A symbolic dimension of the model (its
    ``dim_param``, or ``{input}_dim{k}`` when unnamed) is a ``te.var`` of that name, the
    same variable for every input naming it (``dims`` collects them)."""
    tt = vi.type.tensor_type
    dtype = _dtype(vi)
    if dtype not in DATA_DTYPES:
        raise OpNotImplemented(f"input {vi.name!r} is a {dtype} tensor: kiln compiles "
                               f"{', '.join(DATA_DTYPES)} tensors")
    declared = list(tt.shape.dim) if tt.HasField("shape") else None
    if shape is not None:
        out: list[int | Var] = [int(s) for s in shape]
        if declared is not None and len(declared) != len(out):
            raise OnnxImportError(f"shape={{{vi.name!r}: {tuple(out)}}} has rank {len(out)}, "
                                  f"but the model's input {vi.name!r} has rank {len(declared)}")
    elif declared is None:
        raise OnnxImportError(f"input {vi.name!r} has no shape in the model: pass "
                              f"shape={{'{vi.name}': (...)}}")
    else:
        dims = {} if dims is None else dims
        out = [d.dim_value if d.HasField("dim_value") else
               _symbolic_dim(dims, d.dim_param or f"{vi.name}_dim{k}")
               for k, d in enumerate(declared)]
    if any(isinstance(d, int) and d < 1 for d in out):
        raise OpNotImplemented(f"input {vi.name!r} has shape {out}: kiln compiles tensors "
                               f"whose dimensions are all positive")
    return tuple(out), dtype


def _symbolic_dim(dims: dict[str, Var], name: str) -> Var:
    """The ``te.var`` of the symbolic dimension ``name`` (made on first use)."""
    from kiln import te

    if name not in dims:
        dims[name] = te.var("".join(c if c.isalnum() else "_" for c in name) or "dim")
    return dims[name]


def check_missing_inputs(node, opset: int) -> None:
    """Raise OnnxImportError when ``node`` leaves out (an empty name) an input its operator
    does not declare optional; the checker lets a variadic operand be empty."""
    import onnx

    formals = onnx.defs.get_schema(node.op_type, opset, node.domain).inputs
    for k, name in enumerate(node.input):
        formal = formals[min(k, len(formals) - 1)]
        if not name and formal.option != onnx.defs.OpSchema.FormalParameterOption.Optional:
            raise OnnxImportError(f"input {k} ({formal.name}) is empty, but not optional")


def check_operand_dtypes(op_type: str, xs) -> None:
    """Raise OpNotImplemented when a computed (non-constant) operand of ``op_type`` has a
    dtype kiln's kernel for it does not take; constants are folded at import in numpy."""
    allowed = _OPERAND_DTYPES.get(op_type, ("float32",))
    for k, x in enumerate(xs):
        if allowed is not None and x is not None and not x.is_const and x.dtype not in allowed:
            raise OpNotImplemented(f"input {k} is {x.dtype}: kiln compiles {op_type} for "
                                   f"{', '.join(allowed)} tensors")


def axis(value, rank: int, what: str = "axis", end_inclusive: bool = False) -> int:
    """``value`` as an axis of a ``rank``-D tensor: in ``[-rank, rank - 1]`` (``[-rank, rank]``
    with ``end_inclusive``, Flatten's range), negative axes counting from the end as in ONNX.
    Out-of-range axes are an error, never wrapped."""
    hi = rank if end_inclusive else rank - 1
    if not isinstance(value, int | np.integer) or not -rank <= value <= hi:
        raise OnnxImportError(f"{what} {value} is out of range for a {rank}-D tensor "
                              f"(expected {-rank} to {hi})")
    return int(value) + rank if value < 0 else int(value)


def int_list(at: dict, name: str, n: int, default: tuple[int, ...] | None,
             minimum: int) -> tuple[int, ...]:
    """Attribute ``name`` as ``n`` integers ``>= minimum`` (``default`` when absent)."""
    if name not in at:
        if default is None:
            raise OnnxImportError(f"the attribute {name} is required")
        return default
    v = at[name]
    if not isinstance(v, list | tuple) or len(v) != n or \
            not all(isinstance(i, int) and i >= minimum for i in v):
        raise OnnxImportError(f"{name} must be {n} integers >= {minimum}, got {v!r}")
    return tuple(int(i) for i in v)


def scalar(value: np.ndarray, what: str) -> float:
    """A constant operand that must hold one number (Clip's bounds)."""
    if value.size != 1:
        raise OnnxImportError(f"{what} must be a scalar, got shape {list(value.shape)}")
    return float(value.reshape(()))
