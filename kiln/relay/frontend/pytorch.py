"""PyTorch importer: ``relay.frontend.from_pytorch(script_module, input_infos) -> (mod, params)``.

``script_module`` is a TorchScript module (``torch.jit.trace(model, example)`` or
``torch.jit.script(model)``). Its ``forward`` graph is inlined (submodule calls expanded) and
walked node by node, in order:

* ``prim::GetAttr`` chains from ``self`` reach weights and buffers: each tensor becomes a
  constant node marked as a parameter, named by its attribute path (``features.0.weight``;
  ``features_0_weight`` with ``use_parser_friendly_name``), and an entry of ``params`` when
  the graph uses it; other attributes (``training``) are Python values;
* ``prim::Constant``, ``prim::ListConstruct``/``TupleConstruct`` and their unpacking are Python
  values, so shape computations (``x.view(x.size(0), -1)``) are folded at import;
* ``prim::If`` whose condition is known at import (a scripted module's ``if self.training:``
  and rank checks) converts the branch taken;
* every other operator goes through ``custom_convert_map`` or :data:`.pytorch_ops.CONVERTERS`;
  an in-place variant (``relu_``, ``add_``) is converted as its functional form, and its
  result replaces the value it mutated.

Guarantees: the graph's inputs are the module's ``forward`` arguments, named, shaped and typed
by ``input_infos`` in order; the outputs are the tensors ``forward`` returns (a tuple is
flattened); an operator kiln has no converter for does not stop the walk: after it, one
``NotImplementedError`` lists every such operator of the graph. A converter's error names
the operator and the value it computes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Module, Node, const, input_node
from .pytorch_ops import CONVERTERS

__all__ = ["from_pytorch"]


@dataclass(frozen=True)
class _Attr:
    """A module reached by ``prim::GetAttr``, with its attribute path from ``self``."""

    obj: object
    path: tuple[str, ...]


class _Unconverted:
    """The value of an operator that was not converted (and of everything computed from it)."""


_UNCONVERTED = _Unconverted()


def _input_specs(input_infos, default_dtype: str) -> list[tuple[str, tuple[int, ...], str]]:
    """``input_infos``' ``(name, shape)`` / ``(name, (shape, dtype))`` pairs, checked."""
    specs = []
    for info in input_infos:
        if not (isinstance(info, (list, tuple)) and len(info) == 2 and isinstance(info[0], str)):
            raise ValueError(f"input_infos entries are (name, shape) or (name, (shape, dtype)), "
                             f"got {info!r}")
        name, spec = info
        shape, dtype = spec, default_dtype
        if isinstance(spec, (list, tuple)) and len(spec) == 2 and isinstance(spec[1], str):
            shape, dtype = spec
        if not all(isinstance(s, (int, np.integer)) and s > 0 for s in shape):
            raise ValueError(f"input {name!r}: shape {list(shape)} must be positive integers")
        specs.append((name, tuple(int(s) for s in shape), str(np.dtype(dtype))))
    return specs


def _inlined_graph(script_module):
    """The module's ``forward`` graph with every submodule call inlined."""
    try:
        import torch
    except ImportError as e:
        raise ImportError("relay.frontend.from_pytorch needs PyTorch (pip install torch)") \
            from e
    if not isinstance(script_module, torch.jit.ScriptModule):
        raise TypeError(f"from_pytorch takes a TorchScript module (torch.jit.trace(model, "
                        f"example) or torch.jit.script(model)), got "
                        f"{type(script_module).__name__}")
    graph = script_module.graph.copy()
    torch._C._jit_pass_inline(graph)
    return graph


def _type_name(v) -> str:
    return v.dtype if isinstance(v, Node) else type(v).__name__


class _Importer:
    """The walk over one inlined TorchScript graph; ``values`` maps each TorchScript value
    (by debug name) to its converted value."""

    def __init__(self, converters: dict[str, Callable], custom: dict[str, Callable],
                 attr_sep: str) -> None:
        self.converters = converters
        self.custom = custom
        self.attr_sep = attr_sep
        self.values: dict[str, object] = {}
        self.params: dict[str, Node] = {}
        self.unsupported: set[str] = set()

    # ---- the walk ----------------------------------------------------------------------
    def block(self, nodes) -> None:
        for node in nodes:
            self.node(node)

    def node(self, node) -> None:
        kind = node.kind()
        outs = [o.debugName() for o in node.outputs()]
        args = [self.values[v.debugName()] for v in node.inputs()]
        prim = _PRIM.get(kind)
        if prim is None and not self._convertible(kind):
            self.unsupported.add(kind)
            result = _UNCONVERTED
        elif any(a is _UNCONVERTED for a in args):
            result = _UNCONVERTED
        elif prim is not None:
            result = prim(self, node, args)
        else:
            result = self._convert(kind, args, outs[0] if outs else kind)
        self._bind(node, outs, result)

    def _bind(self, node, outs: list[str], result) -> None:
        if len(outs) == 1:
            self.values[outs[0]] = result
            if _in_place(node.kind()):  # later uses of the mutated value read the result
                self.values[node.inputsAt(0).debugName()] = result
        elif outs:
            results = [_UNCONVERTED] * len(outs) if result is _UNCONVERTED else list(result)
            self.values.update(zip(outs, results, strict=True))

    def _convertible(self, kind: str) -> bool:
        return kind in self.custom or _functional(kind) in self.converters

    def _convert(self, kind: str, args: list, name: str):
        try:
            if kind in self.custom:  # TVM's signature: (inputs, input_types)
                return self.custom[kind](args, [_type_name(a) for a in args])
            return self.converters[_functional(kind)](*args, name=name)
        except (NotImplementedError, ValueError) as e:
            raise type(e)(f"{kind} (computing %{name}): {e}") from None

    # ---- prim:: nodes --------------------------------------------------------------------
    def constant(self, node, args):
        out = node.output()
        if out.type().kind() == "FunctionType":  # a called function, inlined away
            return None
        value = out.toIValue()
        if hasattr(value, "detach"):  # a tensor
            return const(value.detach().cpu().numpy(), out.debugName())
        return value

    def get_attr(self, node, args):
        (parent,) = args
        name = node.s("name")
        obj = getattr(parent.obj, name)
        path = (*parent.path, name)
        if hasattr(obj, "detach"):  # a tensor: a weight or a buffer
            full = self.attr_sep.join(path)
            if full not in self.params:
                n = const(obj.detach().cpu().numpy(), full)
                n.attrs["param"] = True
                self.params[full] = n
            return self.params[full]
        if obj is None or isinstance(obj, (bool, int, float, str, list, tuple)):
            return obj
        return _Attr(obj, path)

    def if_(self, node, args):
        """The branch the condition takes; a condition from tensor values is unsupported
        (and so is every unsupported operator of both branches)."""
        cond = args[0]
        blocks = list(node.blocks())
        if not isinstance(cond, bool):
            self.unsupported.add("prim::If (on a tensor value)")
            for b in blocks:
                self.unsupported.update(self._unsupported_in(b))
            return _UNCONVERTED
        taken = blocks[0] if cond else blocks[1]
        self.block(taken.nodes())
        results = [self.values[v.debugName()] for v in taken.outputs()]
        return results[0] if len(results) == 1 else results

    def _unsupported_in(self, block) -> set[str]:
        found = set()
        for n in block.nodes():
            if n.kind() not in _PRIM and not self._convertible(n.kind()):
                found.add(n.kind())
            for b in n.blocks():
                found |= self._unsupported_in(b)
        return found

    def raise_exception(self, node, args):
        raise ValueError(f"the model raises {args[1] if len(args) > 1 else 'an error'} for "
                         f"these input shapes: {args[0]}")


def _functional(kind: str) -> str:
    """``aten::relu_`` -> ``aten::relu``: an in-place operator's functional form."""
    return kind[:-1] if _in_place(kind) else kind


def _in_place(kind: str) -> bool:
    return kind.startswith("aten::") and kind.endswith("_") and not kind.endswith("__")


#: prim:: node kind -> the importer's method (node, converted arguments) -> value
_PRIM: dict[str, Callable] = {
    "prim::Constant": _Importer.constant,
    "prim::GetAttr": _Importer.get_attr,
    "prim::If": _Importer.if_,
    "prim::RaiseException": _Importer.raise_exception,
    "prim::ListConstruct": lambda self, node, args: list(args),
    "prim::TupleConstruct": lambda self, node, args: tuple(args),
    "prim::ListUnpack": lambda self, node, args: list(args[0]),
    "prim::TupleUnpack": lambda self, node, args: list(args[0]),
    "prim::NumToTensor": lambda self, node, args: args[0],
    "prim::unchecked_cast": lambda self, node, args: args[0],
}


def _outputs(values: Sequence) -> list[Node]:
    out: list[Node] = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out += _outputs(v)
        elif isinstance(v, Node):
            out.append(v)
        else:
            raise NotImplementedError(f"the model returns {type(v).__name__} {v!r}, not a "
                                      f"tensor")
    return out


def from_pytorch(script_module, input_infos, custom_convert_map: dict | None = None,
                 default_dtype: str = "float32", use_parser_friendly_name: bool = False):
    """Convert a TorchScript module into ``(mod, params)``, as TVM's ``from_pytorch``.

    ``input_infos`` lists the ``forward`` arguments in order as ``(name, shape)`` or
    ``(name, (shape, dtype))`` (dtype ``default_dtype`` when left out). ``custom_convert_map``
    maps an operator name (``"aten::foo"``) to ``fn(inputs, input_types) -> value``, where
    ``inputs`` are the converted arguments (kiln graph nodes for tensors, Python values for
    the rest) and the value is built with :func:`kiln.relay.graph.call`; it takes precedence
    over kiln's converters. ``use_parser_friendly_name`` names parameters with ``_`` instead
    of ``.``."""
    graph = _inlined_graph(script_module)
    specs = _input_specs(input_infos, default_dtype)
    self_value, *args = list(graph.inputs())
    if len(args) != len(specs):
        raise ValueError(f"the module's forward takes {len(args)} inputs "
                         f"({', '.join(a.debugName() for a in args)}), input_infos gives "
                         f"{len(specs)}")
    imp = _Importer(CONVERTERS, dict(custom_convert_map or {}),
                    "_" if use_parser_friendly_name else ".")
    imp.values[self_value.debugName()] = _Attr(script_module, ())
    inputs = [input_node(*spec) for spec in specs]
    imp.values.update((a.debugName(), n) for a, n in zip(args, inputs, strict=True))
    imp.block(graph.nodes())
    if imp.unsupported:
        raise NotImplementedError(f"The following operators are not implemented by kiln's "
                                  f"PyTorch importer: {sorted(imp.unsupported)}")
    outputs = _outputs([imp.values[v.debugName()] for v in graph.return_node().inputs()])
    g = Graph(inputs, outputs)
    from kiln.runtime import ndarray as nd

    used = {n.name for n in g.nodes if n.is_const and n.attrs.get("param")}
    params = {k: nd.array(v.value) for k, v in imp.params.items() if k in used}
    return Module(g), params
