"""``torch.compile(model, backend="kiln")``: kiln as a TorchDynamo backend.

Importing this module registers the backend under the name ``"kiln"``; in an installed kiln
the package's ``torch_dynamo_backends`` entry point names it, so that ``backend="kiln"``
works without the import. :func:`kiln_backend` receives each FX graph TorchDynamo captures
and returns a :class:`KilnCompiledGraph`, which runs it:

* the graph's parameters and buffers (the inputs TorchDynamo lifted from the module's
  ``_parameters`` and ``_buffers``, any ``nn.Parameter`` input, or attributes of the graph
  module) become constants of the compiled model, frozen at compile time as
  ``relay.build`` freezes ``params`` (call ``torch._dynamo.reset()`` and compile again after
  changing them);
* for each new signature of its arguments (tensor shapes and dtypes, integer values: the
  sizes of a graph TorchDynamo made dynamic) the graph is exported to ONNX in memory
  (``torch.onnx.export``, the TorchScript exporter, integers as constants), imported by
  ``relay.frontend.from_onnx`` and built by ``relay.build`` for ``llvm`` at ``opt_level=3``;
  the module is cached per signature;
* a call binds each input tensor's memory through DLPack and the module reads it there
  (``set_input_zero_copy``, no copy) when it is contiguous and 64-byte aligned (torch's CPU
  allocator aligns so); any other input is copied once into the module's input buffer;
  each output is copied once out of the module's buffers (reused by the next call) into a
  new tensor handed to torch through DLPack;
* a graph kiln cannot compile (an operator the ONNX exporter or kiln's importer does not
  convert, an input not on the CPU, of another dtype or requiring grad) runs eagerly as
  ``gm.forward`` after ONE warning on the ``kiln.torch`` logger naming the reason (for an
  unsupported operator, the operator).

Guarantee: the callable returns ``gm.forward``'s outputs, as a tuple, within kiln's float32
tolerance of eager; compiled outputs carry no autograd history (kiln compiles inference).
"""

from __future__ import annotations

import io
import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._dynamo.source import is_from_unspecialized_param_buffer_source

from kiln.runtime import graph_executor
from kiln.runtime.device import cpu
from kiln.runtime.dlpack import from_dlpack
from kiln.runtime.ndarray import ALIGNMENT

from ..build_module import build, build_config
from .onnx import OnnxImportError, OpNotImplemented, from_onnx

__all__ = ["kiln_backend", "KilnCompiledGraph"]

logger = logging.getLogger("kiln.torch")

#: the ONNX opset of the export (LayerNormalization is an ONNX operator from 17)
OPSET = 17

#: the failures that mean "kiln cannot compile this graph" (fall back to eager); any other
#: exception is a bug and propagates
_UNSUPPORTED = (OpNotImplemented, OnnxImportError, NotImplementedError,
                torch.onnx.errors.OnnxExporterError, torch.onnx.errors.UnsupportedOperatorError)


class _Frozen(torch.nn.Module):
    """``gm`` with some arguments bound: parameters as buffers (the export makes them ONNX
    initializers, which kiln folds and lays out at build time) and integers (TorchDynamo's
    symbolic sizes) as constants; its ``forward`` takes the remaining tensors."""

    def __init__(self, gm: torch.fx.GraphModule, bound: dict[int, Any], n_args: int) -> None:
        super().__init__()
        self.gm = gm
        self.bound = {k: v for k, v in bound.items() if not isinstance(v, torch.Tensor)}
        self.buffers_at = [k for k, v in bound.items() if isinstance(v, torch.Tensor)]
        self.n_args = n_args
        for k in self.buffers_at:
            self.register_buffer(f"arg{k}", bound[k].detach())

    def forward(self, *tensors: torch.Tensor) -> Any:
        it = iter(tensors)
        args = [getattr(self, f"arg{k}") if k in self.buffers_at else
                self.bound[k] if k in self.bound else next(it) for k in range(self.n_args)]
        return self.gm(*args)


def _signature(args: Sequence[Any]) -> tuple:
    """The cache key of a call: each tensor's shape and dtype, other arguments' values."""
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)


class KilnCompiledGraph:
    """The callable :func:`kiln_backend` returns for one FX graph: compiled modules by call
    signature, eager ``gm.forward`` once a signature cannot be compiled."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> None:
        self.gm = gm
        self.frozen = {k: example_inputs[k] for k in _weights(gm, example_inputs)}
        #: call signature -> the compiled module and the positions (among the call's
        #: tensors) of its inputs, ``input{position}``: the export leaves out a tensor the
        #: graph does not read
        self.compiled: dict[tuple, tuple[graph_executor.GraphModule, list[int]]] = {}
        self.eager = False

    def __call__(self, *args: Any) -> Any:
        if self.eager:
            return self.gm.forward(*args)
        runtime = [a for k, a in enumerate(args) if k not in self.frozen]
        key = _signature(runtime)
        if key not in self.compiled:
            reason = _unsupported_input(runtime)
            module = None if reason else self._build(args)
            if module is None:
                if reason:
                    logger.warning("kiln: running this graph eagerly: %s", reason)
                self.eager = True
                return self.gm.forward(*args)
            self.compiled[key] = module
        return _run(*self.compiled[key], runtime)

    def _build(self, args: Sequence[Any]
               ) -> tuple[graph_executor.GraphModule, list[int]] | None:
        """The graph exported, imported and built for these arguments (their integers
        constants), or None after logging why kiln cannot compile it."""
        bound = {**self.frozen, **{k: a for k, a in enumerate(args)
                                   if not isinstance(a, torch.Tensor)}}
        module = _Frozen(self.gm, bound, len(args)).eval()
        tensors = tuple(a for k, a in enumerate(args) if k not in bound)
        names = [f"input{k}" for k in range(len(tensors))]
        buf = io.BytesIO()
        try:
            with torch.no_grad(), warnings.catch_warnings():
                # the TorchScript exporter warns that it is not the default any more
                warnings.simplefilter("ignore", DeprecationWarning)
                torch.onnx.export(module, tensors, buf, dynamo=False,
                                  opset_version=OPSET, input_names=names,
                                  do_constant_folding=True)
            mod, params = from_onnx(buf.getvalue())
            with build_config(opt_level=3):
                lib = build(mod, target="llvm", params=params)
        except _UNSUPPORTED as e:
            logger.warning("kiln: running this graph eagerly: %s", _first_line(e))
            return None
        used = [names.index(n.name) for n in mod["main"].inputs]
        return graph_executor.GraphModule(lib["default"](cpu())), used


def _weights(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> list[int]:
    """The positions of the graph's parameters and buffers among its inputs: ``nn.Parameter``
    inputs and the inputs TorchDynamo lifted from a module's ``_parameters``/``_buffers``."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [k for k, (node, t) in enumerate(zip(placeholders, example_inputs, strict=False))
            if isinstance(t, torch.nn.Parameter) or _is_module_state(node)]


def _is_module_state(node: torch.fx.Node) -> bool:
    """Whether TorchDynamo lifted this placeholder from a module's parameters or buffers."""
    source = getattr(node.meta.get("grapharg"), "source", None)
    return source is not None and is_from_unspecialized_param_buffer_source(source)


def _run(module: graph_executor.GraphModule, used: list[int], runtime: list[Any]) -> tuple:
    """Run ``module`` on the call's tensors (each bound through DLPack: read in place where
    it can be, :func:`_bind`) and return its outputs as new torch tensors."""
    tensors = [a for a in runtime if isinstance(a, torch.Tensor)]
    for pos in used:
        _bind(module, f"input{pos}", tensors[pos].detach())
    module.run()
    return tuple(torch.from_dlpack(module.get_output(k))
                 for k in range(module.get_num_outputs()))


def _bind(module: graph_executor.GraphModule, name: str, tensor: torch.Tensor) -> None:
    """Input ``name`` of ``module`` read from ``tensor``'s memory (zero copy) when the
    compiled code can read it there (contiguous, 64-byte aligned, the input's dtype), else
    copied once into the module's input buffer."""
    if (tensor.is_contiguous() and tensor.data_ptr() % ALIGNMENT == 0
            and str(tensor.dtype).removeprefix("torch.") == module.get_input(name).dtype):
        module.set_input_zero_copy(name, from_dlpack(tensor))
    else:
        module.set_input(name, tensor.contiguous().numpy())


#: the input dtypes kiln's importer takes
_DTYPES = ("float32", "float64", "float16", "int64", "int32", "uint8", "bool")


def _unsupported_input(runtime: list[Any]) -> str | None:
    """Why kiln cannot run a call with these arguments (None when it can)."""
    for k, a in enumerate(runtime):
        if not isinstance(a, torch.Tensor):
            continue
        if a.device.type != "cpu":
            return f"input {k} is on {a.device} (kiln's torch backend compiles for the CPU)"
        if a.requires_grad:
            return f"input {k} requires grad (kiln's torch backend compiles inference only)"
        if str(a.dtype).removeprefix("torch.") not in _DTYPES:
            return f"input {k} is {a.dtype}"
    return None


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def kiln_backend(gm: torch.fx.GraphModule,
                 example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """The TorchDynamo backend: a :class:`KilnCompiledGraph` of ``gm``."""
    return KilnCompiledGraph(gm, example_inputs)


def _register() -> None:
    """Register ``"kiln"`` with TorchDynamo unless the entry point already names it."""
    from torch._dynamo.backends import registry

    registry._lazy_import()
    if "kiln" not in registry._BACKENDS:
        registry.register_backend(kiln_backend, name="kiln")


_register()
