"""Models for testing and benchmarking the graph compiler (TVM's ``relay.testing``).

``kiln.relay.testing.resnet18()``, ``resnet50()``, ``mobilenet_v2()``, ``bert_encoder()`` and
``vit()`` build the networks as ONNX models with ``onnx.helper``, their weights drawn from a
seeded numpy generator (nothing is downloaded; the same seed gives the same model);
``get_model(name)`` builds one by name. Small single-feature models (a conv with
bias and relu, a residual block, a depthwise block, ...) serve the tests.
``onnx_to_torch`` runs such a model with PyTorch eager operators, for comparisons
(``onnx_to_fx``: the same as one ``torch.fx`` graph, for ``torch.compile``).

Needs the ``onnx`` package: ``pip install 'kiln[onnx]'``.
"""

from __future__ import annotations

try:
    import onnx  # noqa: F401
except ImportError as e:
    raise ImportError("kiln.relay.testing builds ONNX models and needs the onnx package: "
                      "pip install 'kiln[onnx]'") from e

from .onnx_models import (
    attention_block,
    conv_bias_relu,
    depthwise,
    exported_flatten_pattern,
    gemm_classifier,
    inception_block,
    maxpool_relu,
    mlp_block,
    mobilenet_v2,
    pooling,
    random_input,
    reshape_matmul_concat,
    residual_block,
    resnet18,
    resnet50,
    two_branches,
)
from .registry import MODELS, get_model
from .torch_models import onnx_to_fx, onnx_to_torch
from .transformer_models import bert_encoder, vit

__all__ = ["MODELS", "get_model", "random_input", "resnet18", "resnet50", "mobilenet_v2",
           "bert_encoder", "vit",
           "conv_bias_relu", "residual_block", "depthwise", "pooling", "gemm_classifier",
           "reshape_matmul_concat", "two_branches", "exported_flatten_pattern",
           "maxpool_relu", "mlp_block", "attention_block", "inception_block",
           "onnx_to_torch", "onnx_to_fx"]
