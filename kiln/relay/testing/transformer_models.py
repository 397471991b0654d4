"""Transformer encoders as ONNX models (opset 17), weights from a seeded numpy generator.

The graphs are the operators ``torch.onnx.export`` writes for the PyTorch modules (HF
``BertModel``, torchvision's ``vit_b_16``): ``MatMul`` by a constant ``[K, N]`` weight plus
a bias ``Add`` for each linear layer; attention as ``Reshape`` to heads, ``Transpose``,
batched ``MatMul``, a ``Div`` by ``sqrt(head size)``, ``Softmax`` on the last axis,
``MatMul``, ``Transpose`` and ``Reshape`` back; ``LayerNormalization``; the exact GELU as
``Div``/``Erf``/``Add``/``Mul``. Nothing is downloaded and the same arguments give the same
model, byte for byte.

* :func:`bert_encoder`: BERT-base (12 layers, hidden 768, 12 heads, feed-forward 3072) on
  ``input_ids`` ``[batch, seq]`` (int64, in ``[0, vocab)``; sequence 128 by default):
  word embeddings (``Gather``) plus position and token-type embeddings, layer norm, then
  post-norm encoder layers; output ``last_hidden_state`` ``[batch, seq, hidden]``.
* :func:`vit`: a ViT-B/16-style vision transformer on ``input`` ``[batch, 3, hw, hw]``: a
  ``patch x patch`` stride-``patch`` convolution to the hidden size, a class token
  (``Expand``, ``Concat``), position embeddings, pre-norm encoder layers, a final layer
  norm and a linear head on the class token (``Gather``); output ``[batch, classes]``.

Small configurations (``layers=2, hidden=64, heads=4, ...``) build the same graphs for tests.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .onnx_models import _model

#: LayerNormalization is in the default domain from opset 17
OPSET = 17


class _Encoder:
    """An ONNX graph builder for transformer encoders: linear layers, layer norms,
    multi-head self-attention and the GELU MLP, with weights drawn from ``seed``."""

    def __init__(self, seed: int, hidden: int, heads: int, eps: float) -> None:
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not a multiple of the {heads} heads")
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.hidden, self.heads, self.eps = hidden, heads, eps
        self.k = 0

    def _name(self, prefix: str) -> str:
        self.k += 1
        return f"{prefix}{self.k}"

    def init(self, prefix: str, value: np.ndarray) -> str:
        name = self._name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, prefix: str, *shape: int, scale: float) -> str:
        return self.init(prefix, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, kind: str, *xs: str, **attrs) -> str:
        y = self._name(kind.lower())
        self.nodes.append(helper.make_node(kind, list(xs), [y], name=y, **attrs))
        return y

    def linear(self, x: str, k: int, n: int) -> str:
        """``x @ W + b`` with ``W`` ``[k, n]`` (scaled for unit-variance outputs)."""
        w = self.weight("w", k, n, scale=k ** -0.5)
        return self.op("Add", self.op("MatMul", x, w), self.weight("b", n, scale=0.02))

    def layer_norm(self, x: str) -> str:
        d = self.hidden
        gamma = self.init("ln_g", (1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32))
        return self.op("LayerNormalization", x, gamma, self.weight("ln_b", d, scale=0.1),
                       axis=-1, epsilon=self.eps)

    def gelu(self, x: str) -> str:
        """The exact GELU as exporters write it: ``x * 0.5 * (1 + erf(x / sqrt(2)))``."""
        e = self.op("Erf", self.op("Div", x, self.init("sqrt2", np.float32(math.sqrt(2)))))
        one, half = self.init("one", np.float32(1)), self.init("half", np.float32(0.5))
        return self.op("Mul", self.op("Mul", x, self.op("Add", e, one)), half)

    def attention(self, x: str, batch: int, seq: int) -> str:
        """Multi-head self-attention of ``x`` ``[batch, seq, hidden]``."""
        d, h = self.hidden, self.heads
        heads = self.init("heads_shape", np.array([batch, seq, h, d // h], np.int64))
        q, k, v = (self.op("Transpose", self.op("Reshape", self.linear(x, d, d), heads),
                           perm=perm)
                   for perm in ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3]))
        scale = self.init("scale", np.float32(math.sqrt(d // h)))
        probs = self.op("Softmax", self.op("Div", self.op("MatMul", q, k), scale), axis=-1)
        ctx = self.op("Transpose", self.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        merged = self.op("Reshape", ctx, self.init("merged_shape",
                                                   np.array([batch, seq, d], np.int64)))
        return self.linear(merged, d, d)

    def mlp(self, x: str, ffn: int) -> str:
        return self.linear(self.gelu(self.linear(x, self.hidden, ffn)), ffn, self.hidden)


def bert_encoder(seq: int = 128, batch: int = 1, layers: int = 12, hidden: int = 768,
                 heads: int = 12, ffn: int = 3072, vocab: int = 30522, seed: int = 0
                 ) -> onnx.ModelProto:
    """BERT-base encoder: ``input_ids`` ``[batch, seq]`` (int64 in ``[0, vocab)``) ->
    ``last_hidden_state`` ``[batch, seq, hidden]``.

    Embeddings (word ``Gather`` + position + token type 0, layer norm), then ``layers``
    post-norm layers: ``x = LN(x + attention(x)); x = LN(x + W2 gelu(W1 x))``."""
    e = _Encoder(seed, hidden, heads, eps=1e-12)
    words = e.weight("word_emb", vocab, hidden, scale=0.5)
    pos_type = e.weight("pos_type_emb", 1, seq, hidden, scale=0.5)
    x = e.layer_norm(e.op("Add", e.op("Gather", words, "input_ids", axis=0), pos_type))
    for _ in range(layers):
        x = e.layer_norm(e.op("Add", x, e.attention(x, batch, seq)))
        x = e.layer_norm(e.op("Add", x, e.mlp(x, ffn)))
    e.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))
    m = _model(e.nodes, e.inits, [batch, seq], [batch, seq, hidden], inp="input_ids",
               out="last_hidden_state", name="bert_encoder", opset=OPSET,
               inp_type=onnx.TensorProto.INT64)
    helper.set_model_props(m, {"vocab_size": str(vocab)})
    return m


def vit(hw: int = 224, batch: int = 1, patch: int = 16, layers: int = 12, hidden: int = 768,
        heads: int = 12, ffn: int = 3072, classes: int = 1000, seed: int = 0
        ) -> onnx.ModelProto:
    """ViT-B/16-style vision transformer: ``input`` ``[batch, 3, hw, hw]`` -> ``output``
    ``[batch, classes]``.

    Patch embedding (``patch x patch`` convolution, stride ``patch``), class token, position
    embeddings, ``layers`` pre-norm layers ``x = x + attention(LN(x)); x = x + MLP(LN(x))``,
    a final layer norm, and the head on the class token."""
    if hw % patch:
        raise ValueError(f"vit: image size {hw} is not a multiple of the patch {patch}")
    e = _Encoder(seed, hidden, heads, eps=1e-6)
    tokens = (hw // patch) ** 2 + 1
    conv_w = e.weight("patch_w", hidden, 3, patch, patch, scale=(3 * patch * patch) ** -0.5)
    p = e.op("Conv", "input", conv_w, e.weight("patch_b", hidden, scale=0.02),
             kernel_shape=[patch, patch], strides=[patch, patch])
    flat = e.op("Reshape", p, e.init("flat_shape", np.array([batch, hidden, -1], np.int64)))
    patches = e.op("Transpose", flat, perm=[0, 2, 1])
    cls = e.op("Expand", e.weight("cls", 1, 1, hidden, scale=0.5),
               e.init("cls_shape", np.array([batch, 1, hidden], np.int64)))
    x = e.op("Add", e.op("Concat", cls, patches, axis=1),
             e.weight("pos_emb", 1, tokens, hidden, scale=0.5))
    for _ in range(layers):
        x = e.op("Add", x, e.attention(e.layer_norm(x), batch, tokens))
        x = e.op("Add", x, e.mlp(e.layer_norm(x), ffn))
    first = e.op("Gather", e.layer_norm(x), e.init("cls_index", np.array(0, np.int64)),
                 axis=1)
    e.nodes.append(helper.make_node("Gemm", [first, e.weight("head_w", classes, hidden,
                                                             scale=hidden ** -0.5),
                                             e.weight("head_b", classes, scale=0.02)],
                                    ["output"], name="head", transB=1))
    return _model(e.nodes, e.inits, [batch, 3, hw, hw], [batch, classes], inp="input",
                  out="output", name="vit", opset=OPSET)


__all__ = ["bert_encoder", "vit"]
