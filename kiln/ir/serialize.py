"""``tvm.ir.save_json`` / ``tvm.ir.load_json``: IR trees to JSON text and back.

The document follows the shape of TVM's format (the files are *not* interchangeable with
TVM's: type keys and field names are kiln's)::

    {"root": k, "nodes": [{"type_key": "tir.Add", "attrs": {"a": 1, "b": 2, "dtype": 3}}, ...],
     "attrs": {"tvm_version": "kiln-1"}}

Every value is one entry of the ``nodes`` table and is referred to by its index: IR nodes
(``{"type_key", "attrs"}``, one attr per field of the node's ``_fields`` plus ``dtype`` for
expressions), ``Array`` (tuples and lists, ``"data"``: indices), ``Map`` (dicts, ``"keys"`` and
``"data"``), ``ForKind``, ``IRModule`` and the plain values ``Int``, ``Float``, ``Bool``,
``String`` and ``None`` (``"value"``).

Guarantees: ``load_json(save_json(x))`` is structurally equal to ``x`` (with
``map_free_vars=True``: the loaded variables are new objects). Sharing is kept: an object used
in several places (a Var, a Buffer, a subexpression) is saved once and loads back as one
object, and two distinct Vars of the same name stay two. Nodes are rebuilt field by field,
without calling their constructors, so dtypes and field values are exactly the saved ones.

Non-IR objects cannot be saved, with one exception: the operation a ``produce`` attribute
(or any ``AttrStmt``) names is saved by its name and loads back as an :class:`OperationRef`,
which prints and compares (``structural_equal``) by that name and is enough to compile the
function. Any other foreign object, such as the ``te.Tensor`` of a ``ProducerLoad`` before
storage flattening, raises :class:`~kiln.errors.TVMError` naming its type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kiln.errors import TVMError

from . import expr as E
from . import stmt as S

#: the ``tvm_version`` attribute of kiln's documents; loading checks it
FORMAT_VERSION = "kiln-1"


@dataclass(frozen=True)
class OperationRef:
    """A loaded stand-in for a te operation named by an ``AttrStmt`` (``produce C``)."""

    name: str
    tag: str = ""


def _node_classes() -> dict[str, type[E.Node]]:
    """type key -> IR node class, for every node class of :mod:`expr` and :mod:`stmt`."""
    out: dict[str, type[E.Node]] = {}
    for module in (E, S):
        for cls in vars(module).values():
            if (isinstance(cls, type) and issubclass(cls, E.Node)
                    and cls.__module__ == module.__name__):
                out[cls.type_key()] = cls
    return out


_CLASS_OF: dict[str, type[E.Node]] = _node_classes()
_KEY_OF: dict[type[E.Node], str] = {cls: key for key, cls in _CLASS_OF.items()}


def _fields_of(cls: type[E.Node]) -> tuple[str, ...]:
    """The slots that make up a node: its ``_fields``, plus ``dtype`` for an expression."""
    return cls._fields + (("dtype",) if issubclass(cls, E.PrimExpr) else ())


class _Writer:
    """Fills the node table; an object seen before is referred to by its first index."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.index: dict[int, int] = {}
        self.keep: list[object] = []  # keeps saved objects alive so that their ids stay unique

    def add(self, entry: dict[str, Any]) -> int:
        self.nodes.append(entry)
        return len(self.nodes) - 1

    def ref(self, value: object) -> int:
        shared = isinstance(value, E.Node | S.IRModule)
        if shared and id(value) in self.index:
            return self.index[id(value)]
        k = self.add(self.entry(value))
        if shared:
            self.index[id(value)] = k
            self.keep.append(value)
        return k

    def entry(self, value: object) -> dict[str, Any]:
        if value is None:
            return {"type_key": "None"}
        if isinstance(value, bool):
            return {"type_key": "Bool", "value": value}
        if isinstance(value, int):
            return {"type_key": "Int", "value": value}
        if isinstance(value, float):
            return {"type_key": "Float", "value": value}
        if isinstance(value, str):
            return {"type_key": "String", "value": value}
        if isinstance(value, S.ForKind):
            return {"type_key": "ForKind", "value": value.value}
        if isinstance(value, tuple | list):
            return {"type_key": "Array", "data": [self.ref(v) for v in value]}
        if isinstance(value, dict):
            keys = [self.ref(k) for k in value]
            return {"type_key": "Map", "keys": keys, "data": [self.ref(v) for v in value.values()]}
        if isinstance(value, S.IRModule):
            return {"type_key": "IRModule", "attrs": {"functions": self.ref(value.functions)}}
        if isinstance(value, E.Node) and type(value) in _KEY_OF:
            return {"type_key": _KEY_OF[type(value)], "attrs": self.fields(value)}
        raise TVMError(f"save_json: cannot serialize a {_type_name(value)} (not an IR value)")

    def fields(self, node: E.Node) -> dict[str, int]:
        out = {}
        for f in _fields_of(type(node)):
            v = getattr(node, f)
            if isinstance(node, S.AttrStmt) and f == "node" and _is_operation(v):
                out[f] = self.add({"type_key": "te.OperationRef",
                                   "value": v.name, "tag": getattr(v, "tag", "")})
            else:
                out[f] = self.ref(v)
        return out


def _is_operation(value: object) -> bool:
    """A foreign object an ``AttrStmt`` names by its ``name`` (a te operation)."""
    plain = (E.Node, S.IRModule, tuple, list, dict, str, int, float, type(None))
    return not isinstance(value, plain) and isinstance(getattr(value, "name", None), str)


def _type_name(value: object) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


def save_json(node: object) -> str:
    """Serialize an IR node (expression, statement, Buffer, PrimFunc, IRModule, ...) to JSON."""
    writer = _Writer()
    root = writer.ref(node)
    return json.dumps({"root": root, "nodes": writer.nodes,
                       "attrs": {"tvm_version": FORMAT_VERSION}})


class _Reader:
    """Rebuilds the values of a node table, each entry once."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes
        self.done: dict[int, object] = {}

    def get(self, k: int) -> object:
        if k not in self.done:
            self.done[k] = self.build(self.nodes[k])
        return self.done[k]

    def build(self, entry: dict[str, Any]) -> object:
        key = entry["type_key"]
        if key == "None":
            return None
        if key in ("Bool", "Int", "Float", "String"):
            return entry["value"]
        if key == "ForKind":
            return S.ForKind(entry["value"])
        if key == "Array":
            return tuple(self.get(k) for k in entry["data"])
        if key == "Map":
            return {self.get(k): self.get(v) for k, v in zip(entry["keys"], entry["data"],
                                                           strict=True)}
        if key == "te.OperationRef":
            return OperationRef(entry["value"], entry.get("tag", ""))
        if key == "IRModule":
            return S.IRModule(self.get(entry["attrs"]["functions"]))
        cls = _CLASS_OF.get(key)
        if cls is None:
            raise TVMError(f"load_json: unknown type key {key!r}")
        node = object.__new__(cls)
        for f in _fields_of(cls):
            object.__setattr__(node, f, self.get(entry["attrs"][f]))
        return node


def load_json(text: str) -> object:
    """The IR value that :func:`save_json` wrote to ``text``."""
    doc = json.loads(text)
    version = doc.get("attrs", {}).get("tvm_version")
    if version != FORMAT_VERSION:
        raise TVMError(f"load_json: not a kiln IR document (tvm_version {version!r}, "
                       f"expected {FORMAT_VERSION!r}); TVM's own JSON files cannot be loaded")
    return _Reader(doc["nodes"]).get(doc["root"])
