"""Model importers (``relay.frontend.from_onnx``)."""

from .onnx import OnnxImportError, from_onnx

__all__ = ["from_onnx", "OnnxImportError"]
