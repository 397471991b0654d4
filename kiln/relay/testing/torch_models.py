"""Run an ONNX model with PyTorch eager operators: ``onnx_to_torch(model)``.

The returned ``torch.nn.Module`` holds the model's initializers as buffers and, in
``forward``, calls one ``torch.nn.functional`` operator per ONNX node in the graph's order —
what a hand-written eager model does, with the same weights. It covers the operators of
:mod:`kiln.relay.testing`'s models (Conv, BatchNormalization, pooling, Gemm, elementwise
ops, Clip, Flatten, Reshape, Concat, Softmax, Shape/Gather/Unsqueeze, the transformers'
MatMul, LayerNormalization, Erf, Expand, ...); another operator raises
``NotImplementedError`` naming it. PyTorch is imported only when this is called.
"""

from __future__ import annotations

import numpy as np


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _sym_pads(pads, what):
    """ONNX ``[top, left, bottom, right]`` pads as torch's symmetric ``(h, w)`` padding, or
    ``None`` when they are asymmetric (then an explicit ``F.pad`` is needed)."""
    pads = list(pads or [0, 0, 0, 0])
    if len(pads) != 4:
        raise NotImplementedError(f"onnx_to_torch: {what} with pads {pads} (only 2-D)")
    if pads[:2] == pads[2:]:
        return (int(pads[0]), int(pads[1])), None
    return (0, 0), (int(pads[1]), int(pads[3]), int(pads[0]), int(pads[2]))


def _auto_pad_unsupported(at, what):
    auto = at.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto not in ("NOTSET", "VALID"):
        raise NotImplementedError(f"onnx_to_torch: {what} with auto_pad={auto}")


def _convert(node, xs, at, F, torch):  # noqa: N803
    op = node.op_type
    if op == "Conv":
        _auto_pad_unsupported(at, "Conv")
        pad, explicit = _sym_pads(at.get("pads"), "Conv")
        x = F.pad(xs[0], explicit) if explicit else xs[0]
        return F.conv2d(x, xs[1], xs[2] if len(xs) > 2 else None,
                        stride=tuple(at.get("strides", (1, 1))), padding=pad,
                        dilation=tuple(at.get("dilations", (1, 1))), groups=at.get("group", 1))
    if op == "BatchNormalization":
        x, g, b, m, v = xs
        return F.batch_norm(x, m, v, g, b, training=False, eps=at.get("epsilon", 1e-5))
    if op in ("MaxPool", "AveragePool"):
        _auto_pad_unsupported(at, op)
        pad, explicit = _sym_pads(at.get("pads"), op)
        k = tuple(at["kernel_shape"])
        s = tuple(at.get("strides", (1, 1)))
        ceil = bool(at.get("ceil_mode", 0))
        if op == "MaxPool":
            x = F.pad(xs[0], explicit, value=float("-inf")) if explicit else xs[0]
            return F.max_pool2d(x, k, s, pad, ceil_mode=ceil)
        if explicit:
            raise NotImplementedError("onnx_to_torch: AveragePool with asymmetric pads")
        return F.avg_pool2d(xs[0], k, s, pad, ceil_mode=ceil,
                            count_include_pad=bool(at.get("count_include_pad", 0)))
    if op == "GlobalAveragePool":
        return xs[0].mean(dim=(2, 3), keepdim=True)
    if op == "Gemm":
        a, b = xs[0], xs[1]
        a = a.t() if at.get("transA", 0) else a
        b = b.t() if at.get("transB", 0) else b
        y = at.get("alpha", 1.0) * (a @ b)
        return y + at.get("beta", 1.0) * xs[2] if len(xs) > 2 else y
    if op == "Clip":
        lo = xs[1].item() if len(xs) > 1 and xs[1] is not None else None
        hi = xs[2].item() if len(xs) > 2 and xs[2] is not None else None
        return torch.clamp(xs[0], lo, hi)
    if op == "Flatten":
        return torch.flatten(xs[0], int(at.get("axis", 1)))
    if op == "Reshape":
        shape = [int(s) for s in xs[1].tolist()]
        shape = [xs[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
        return xs[0].reshape(shape)
    if op == "Concat":
        return torch.cat(xs, dim=int(at["axis"]))
    if op == "Softmax":
        return F.softmax(xs[0], dim=int(at.get("axis", -1)))
    if op == "LeakyRelu":
        return F.leaky_relu(xs[0], at.get("alpha", 0.01))
    if op == "Shape":
        return torch.tensor(xs[0].shape, dtype=torch.int64)
    if op == "Gather":
        axis = int(at.get("axis", 0)) % xs[0].dim()
        idx = xs[1].to(torch.int64)
        y = torch.index_select(xs[0], axis, idx.reshape(-1))
        return y.reshape(xs[0].shape[:axis] + idx.shape + xs[0].shape[axis + 1:])
    if op in ("Unsqueeze", "Squeeze"):
        axes = at.get("axes") or (xs[1].tolist() if len(xs) > 1 else None)
        if op == "Squeeze":
            return xs[0].squeeze() if axes is None else xs[0].squeeze(tuple(axes))
        y = xs[0]
        for a in sorted(int(a) % (y.dim() + len(axes)) for a in axes):
            y = y.unsqueeze(a)
        return y
    if op == "Transpose":
        return xs[0].permute(*at["perm"])
    if op == "LayerNormalization":
        axis = int(at.get("axis", -1)) % xs[0].dim()
        return F.layer_norm(xs[0], xs[0].shape[axis:], xs[1], xs[2] if len(xs) > 2 else None,
                            eps=at.get("epsilon", 1e-5))
    if op == "Expand":
        shape = torch.broadcast_shapes(xs[0].shape, tuple(int(s) for s in xs[1].tolist()))
        return xs[0].expand(shape)
    simple = {"Relu": F.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh,
              "Identity": lambda x: x, "Dropout": lambda x, *_: x,
              "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div,
              "MatMul": torch.matmul, "Erf": torch.erf}
    if op in simple:
        return simple[op](*xs)
    raise NotImplementedError(f"onnx_to_torch: ONNX operator {op!r} (node {node.name!r}) is "
                              f"not supported")


def onnx_to_torch(model):
    """A ``torch.nn.Module`` (eval mode, float32) computing ``model``'s first output from its
    inputs, passed positionally in the graph's input order."""
    try:
        import torch
        import torch.nn.functional as F  # noqa: N812
    except ImportError as e:
        raise ImportError("onnx_to_torch needs PyTorch (pip install torch)") from e
    from onnx import numpy_helper

    graph = model.graph
    inits = {i.name: np.array(numpy_helper.to_array(i)) for i in graph.initializer}
    inputs = [vi.name for vi in graph.input if vi.name not in inits]
    nodes = [(n, _attrs(n)) for n in graph.node]
    output = graph.output[0].name

    class OnnxModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self._keys = {}
            for k, (name, v) in enumerate(inits.items()):
                self._keys[name] = f"p{k}"
                self.register_buffer(f"p{k}", torch.from_numpy(v.copy()))

        def forward(self, *args):
            env = dict(zip(inputs, args, strict=True))
            for name, key in self._keys.items():
                env[name] = getattr(self, key)
            for node, at in nodes:
                xs = [env[i] if i else None for i in node.input]
                env[node.output[0]] = _convert(node, xs, at, F, torch)
            return env[output]

    return OnnxModule().eval()


def onnx_to_fx(model):
    """:func:`onnx_to_torch`'s module traced by ``torch.fx`` into one flat graph module of
    the same operators and buffers, taking the graph's one input: what ``torch.compile``
    captures whole (TorchDynamo breaks the node-by-node ``forward`` into many graphs)."""
    import torch

    module = onnx_to_torch(model)

    class OneInput(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = module

        def forward(self, x):
            return self.model(x)

    return torch.fx.symbolic_trace(OneInput()).eval()
