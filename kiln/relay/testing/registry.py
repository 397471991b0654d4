"""The test and benchmark models by name: ``MODELS`` and ``get_model`` (what
``kiln model --list`` and ``kiln bench models`` show)."""

from __future__ import annotations

from collections.abc import Callable

import onnx

from . import onnx_models as zoo
from .transformer_models import bert_encoder, vit

#: name -> builder, for ``get_model`` and the command line
MODELS: dict[str, Callable[..., onnx.ModelProto]] = {
    "resnet18": zoo.resnet18,
    "resnet50": zoo.resnet50,
    "mobilenet_v2": zoo.mobilenet_v2,
    "bert_encoder": bert_encoder,
    "vit": vit,
    "conv_bias_relu": zoo.conv_bias_relu,
    "residual_block": zoo.residual_block,
    "depthwise": zoo.depthwise,
    "pooling": zoo.pooling,
    "gemm_classifier": zoo.gemm_classifier,
    "reshape_matmul_concat": zoo.reshape_matmul_concat,
    "two_branches": zoo.two_branches,
    "exported_flatten_pattern": zoo.exported_flatten_pattern,
    "maxpool_relu": zoo.maxpool_relu,
    "mlp_block": zoo.mlp_block,
    "attention_block": zoo.attention_block,
    "inception_block": zoo.inception_block,
}


def get_model(name: str, **kwargs) -> onnx.ModelProto:
    """The model ``name`` of :data:`MODELS` built with ``kwargs``; KeyError names the known
    models."""
    if name not in MODELS:
        raise KeyError(f"unknown test model {name!r} (known: {', '.join(MODELS)})")
    return MODELS[name](**kwargs)
