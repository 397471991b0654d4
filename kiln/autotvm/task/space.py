"""Config spaces: the knobs a template defines, and the points of their product.

A template asks ``cfg = autotvm.get_config()`` for its config and *defines* knobs on it
(``cfg.define_split("tile_x", x, num_outputs=2)``, ``define_reorder``, ``define_annotate``,
``define_knob``) before reading them (``cfg["tile_x"].apply(s, C, x)``). What a define call
does depends on what ``cfg`` is:

* a :class:`ConfigSpace` (while ``autotvm.task.create`` runs the template once): the knob's
  candidates are recorded, and reading it gives its first candidate so the template runs on;
* a :class:`ConfigEntity` (one point of the space, chosen by a tuner or read from a log):
  define calls do nothing, reading gives the chosen candidate;
* a :class:`FallbackConfigEntity` (nothing tuned for this workload): each knob takes a safe
  default (no split, identity order, no annotation, the first option) unless the template
  or operator library has set one with ``cfg["tile_x"] = SplitEntity([-1, 8])``.

A space's size is the product of its knobs' sizes; config ``index`` is the mixed-radix
number whose digits (first knob fastest) are the knobs' choices.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

from kiln.ir.expr import IntImm, IterVar

__all__ = [
    "ConfigSpace", "ConfigEntity", "FallbackConfigEntity", "VirtualAxis",
    "SplitSpace", "ReorderSpace", "AnnotateSpace", "OtherOptionSpace",
    "SplitEntity", "ReorderEntity", "AnnotateEntity", "OtherOptionEntity",
    "InstantiationError",
]


class InstantiationError(ValueError):
    """A config the template rejects (``cfg.raise_error``): it is recorded, never built."""


# ---------------------------------------------------------------------------------------
# Entities: one choice of one knob
# ---------------------------------------------------------------------------------------
class SplitEntity:
    """Factors of one split: ``size = [-1, f1, ..., fn]`` (the outermost, -1, is whatever
    remains). ``apply(s, C, axis)`` splits ``axis`` into ``len(size)`` loops, outermost
    first, and returns them."""

    kind = "split"

    def __init__(self, size: Sequence[int]):
        self.size = [int(v) for v in size]

    def apply(self, sch, op, axis) -> list:
        stage = sch[op]
        inners = []
        for factor in reversed(self.size[1:]):
            axis, inner = stage.split(axis, factor=factor)
            inners.append(inner)
        return [axis, *reversed(inners)]

    @property
    def value(self):
        return list(self.size)

    def __eq__(self, other) -> bool:
        return isinstance(other, SplitEntity) and self.size == other.size

    def __hash__(self) -> int:
        return hash(("split", tuple(self.size)))

    def __repr__(self) -> str:
        return f"sp{self.size}"


class ReorderEntity:
    """A permutation of a list of axes: ``apply(s, C, axes)`` reorders ``axes[perm[0]],
    axes[perm[1]], ...`` outermost first and returns the new order."""

    kind = "reorder"

    def __init__(self, perm: Sequence[int]):
        self.perm = [int(v) for v in perm]

    def apply(self, sch, op, axes) -> list:
        if len(axes) != len(self.perm):
            raise ValueError(
                f"reorder: the knob was defined on {len(self.perm)} axes, apply got {len(axes)}")
        ordered = [axes[i] for i in self.perm]
        sch[op].reorder(*ordered)
        return ordered

    @property
    def value(self):
        return list(self.perm)

    def __eq__(self, other) -> bool:
        return isinstance(other, ReorderEntity) and self.perm == other.perm

    def __hash__(self) -> int:
        return hash(("reorder", tuple(self.perm)))

    def __repr__(self) -> str:
        return f"re{self.perm}"


_ANNOTATIONS = ("none", "unroll", "vec", "parallel")


class AnnotateEntity:
    """One annotation per axis (``none``, ``unroll``, ``vec``, ``parallel``).

    ``apply(s, C, axes, axis_lens=None, max_unroll=None, vec_size=None)`` annotates the axes;
    with ``axis_lens`` an ``unroll`` of a loop longer than ``max_unroll``, or a ``vec`` of a
    loop whose length is not in ``vec_size``, is skipped."""

    kind = "annotate"

    def __init__(self, anns: Sequence[str]):
        for a in anns:
            if a not in _ANNOTATIONS:
                raise ValueError(f"unknown annotation {a!r}; use one of {', '.join(_ANNOTATIONS)}")
        self.anns = list(anns)

    def apply(self, sch, op, axes, axis_lens=None, max_unroll=None, vec_size=None,
              cfg=None, source=None) -> list:
        del cfg, source  # accepted for compatibility; kiln needs neither
        stage = sch[op]
        for i, (ann, ax) in enumerate(zip(self.anns, axes, strict=True)):
            n = axis_lens[i] if axis_lens is not None else None
            if ann == "unroll":
                if max_unroll is None or n is None or n <= max_unroll:
                    stage.unroll(ax)
            elif ann == "vec":
                if vec_size is None or n is None or n in vec_size:
                    stage.vectorize(ax)
            elif ann == "parallel":
                stage.parallel(ax)
        return list(axes)

    @property
    def value(self):
        return list(self.anns)

    def __eq__(self, other) -> bool:
        return isinstance(other, AnnotateEntity) and self.anns == other.anns

    def __hash__(self) -> int:
        return hash(("annotate", tuple(self.anns)))

    def __repr__(self) -> str:
        return f"an{self.anns}"


class OtherOptionEntity:
    """One value of a ``define_knob`` (``cfg["unroll"].val``)."""

    kind = "knob"

    def __init__(self, val: Any):
        self.val = val

    @property
    def value(self):
        return self.val

    def __eq__(self, other) -> bool:
        return isinstance(other, OtherOptionEntity) and self.val == other.val

    def __hash__(self) -> int:
        return hash(("knob", repr(self.val)))

    def __repr__(self) -> str:
        return repr(self.val)


_ENTITY_KINDS = {c.kind: c for c in (SplitEntity, ReorderEntity, AnnotateEntity,
                                     OtherOptionEntity)}


def entity_from_json(kind: str, value) -> Any:
    """Inverse of ``(entity.kind, entity.value)``."""
    cls = _ENTITY_KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown knob kind {kind!r} in a config record")
    return cls(value)


# ---------------------------------------------------------------------------------------
# Spaces: all choices of one knob
# ---------------------------------------------------------------------------------------
class VirtualAxis:
    """An axis known only by its length (``cfg.axis(64)``, or ``cfg.axis(iter_var)``)."""

    def __init__(self, var, name: str = "axis"):
        self.length = axis_length(var)
        self.name = getattr(getattr(var, "var", None), "name", name)

    def __repr__(self) -> str:
        return f"VirtualAxis({self.name}, {self.length})"


def axis_length(axis) -> int:
    """The constant length of an IterVar, VirtualAxis or int."""
    if isinstance(axis, VirtualAxis):
        return axis.length
    if isinstance(axis, bool):
        raise TypeError("an axis length must be an int, not a bool")
    if isinstance(axis, int):
        return axis
    if isinstance(axis, IntImm):
        return int(axis.value)
    if isinstance(axis, IterVar):
        ext = axis.dom.extent if axis.dom is not None else None
        if isinstance(ext, IntImm):
            return int(ext.value)
        raise ValueError(
            f"axis '{axis.var.name}' has no constant length; config knobs need constant "
            "shapes (use cfg.axis(n) with the length)")
    raise TypeError(f"expected an axis (IterVar), a VirtualAxis or an int, got "
                    f"{type(axis).__name__}")


class TransformSpace:
    """All candidates of one knob (``entities``); ``space[i]`` is the i-th."""

    kind = ""
    entities: list

    def __len__(self) -> int:
        return len(self.entities)

    def __getitem__(self, i: int):
        return self.entities[i]

    def fallback(self):
        """The entity a FallbackConfigEntity uses."""
        return self.entities[0]

    def describe(self) -> str:
        raise NotImplementedError


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _factor_tuples(n: int, parts: int, cands: Callable[[int], list[int]]) -> list[tuple]:
    """Ordered tuples of ``parts`` inner factors, each chosen by ``cands(remaining)``."""
    if parts == 0:
        return [()]
    out = []
    for f in cands(n):
        rest = n // f if n % f == 0 else -(-n // f)
        for tail in _factor_tuples(rest, parts - 1, cands):
            out.append((*tail, f))
    return out


class SplitSpace(TransformSpace):
    """Ways to split a loop of ``length`` into ``num_outputs`` loops.

    policy ``factors``: inner factors whose product divides ``length`` exactly (no guard);
    ``power2``: inner factors that are powers of two (the outer loop rounds up, guarded);
    ``verbose``: both; ``candidate``: the given ``candidate=[[-1, 6], [-1, 8], ...]``
    (any factors; the outer loop rounds up). ``max_factor`` caps every inner factor;
    ``filter(entity)`` drops candidates for which it returns False."""

    kind = "split"
    POLICIES = ("factors", "power2", "verbose", "candidate")

    def __init__(self, axis, policy: str = "factors", num_outputs: int = 2,
                 max_factor: int | None = None, filter=None, candidate=None):
        if policy not in self.POLICIES:
            raise ValueError(f"define_split: unknown policy {policy!r}; use one of "
                             f"{', '.join(self.POLICIES)}")
        if num_outputs < 1:
            raise ValueError("define_split: num_outputs must be >= 1")
        self.length = axis_length(axis)
        if self.length < 1:
            raise ValueError(f"define_split: axis length must be positive, got {self.length}")
        self.policy, self.num_outputs = policy, int(num_outputs)
        self.max_factor = max_factor if max_factor is not None else self.length
        cap = self.max_factor

        def factors(n):
            return [d for d in _divisors(n) if d <= cap]

        def power2(n):
            return [1 << e for e in range(n.bit_length()) if (1 << e) <= min(n, cap)]

        chosen = {"factors": [factors], "power2": [power2], "verbose": [factors, power2],
                  "candidate": []}
        tuples: list[tuple] = []
        for cands in chosen[policy]:
            tuples += _factor_tuples(self.length, self.num_outputs - 1, cands)
        if policy == "candidate":
            if not candidate:
                raise ValueError("define_split policy 'candidate' needs candidate=[[-1, f], ...]")
            for c in candidate:
                if len(c) != self.num_outputs or any(int(f) < 1 for f in c[1:]):
                    raise ValueError(f"define_split: candidate {list(c)} must be -1 followed by "
                                     f"{self.num_outputs - 1} positive factors")
            tuples = [tuple(int(f) for f in c[1:]) for c in candidate]
        seen = set()
        entities = []
        for t in (tuples if policy == "candidate" else sorted(tuples)):
            if t in seen:
                continue
            seen.add(t)
            e = SplitEntity([-1, *t])
            if filter is None or filter(e):
                entities.append(e)
        if not entities:
            raise ValueError(f"define_split: no candidate left for length {self.length} "
                             f"(policy {policy}, max_factor {max_factor})")
        self.entities = entities

    def fallback(self):
        return SplitEntity([-1] + [1] * (self.num_outputs - 1))

    def describe(self) -> str:
        return (f"Split(policy={self.policy}, product={self.length}, "
                f"num_outputs={self.num_outputs})")


class ReorderSpace(TransformSpace):
    """Orders of ``n`` axes. policy ``identity``; ``all`` (every permutation);
    ``interval_all`` (every permutation of ``axes[l:r]``, ``interval=(l, r)``);
    ``candidate`` (``candidate=[[ax, ...], ...]``, lists of the same axes)."""

    kind = "reorder"
    POLICIES = ("identity", "all", "interval_all", "candidate")

    def __init__(self, axes, policy: str = "all", **kwargs):
        n = len(axes)
        self.policy, self.num_axes = policy, n
        ident = list(range(n))
        if policy == "identity":
            perms = [ident]
        elif policy == "all":
            perms = [list(p) for p in itertools.permutations(ident)]
        elif policy == "interval_all":
            lo, hi = kwargs["interval"]
            perms = [ident[:lo] + list(p) + ident[hi:]
                     for p in itertools.permutations(ident[lo:hi])]
        elif policy == "candidate":
            perms = []
            for cand in kwargs["candidate"]:
                try:
                    perm = [_index_of(axes, ax) for ax in cand]
                except ValueError:
                    raise ValueError("define_reorder: a candidate names an axis that is not "
                                     "in the axes list") from None
                if sorted(perm) != ident:
                    raise ValueError("define_reorder: each candidate must order all the axes")
                perms.append(perm)
        elif policy == "interleave":
            raise NotImplementedError("define_reorder policy 'interleave' is not supported; "
                                      f"use one of {', '.join(self.POLICIES)}")
        else:
            raise ValueError(f"define_reorder: unknown policy {policy!r}; use one of "
                             f"{', '.join(self.POLICIES)}")
        self.entities = [ReorderEntity(p) for p in perms]

    def fallback(self):
        return ReorderEntity(list(range(self.num_axes)))

    def describe(self) -> str:
        return f"Reorder(policy={self.policy}, num_axes={self.num_axes})"


def _index_of(axes, ax) -> int:
    for i, a in enumerate(axes):
        if a is ax:
            return i
    raise ValueError


class AnnotateSpace(TransformSpace):
    """Annotations of ``n`` axes. policy ``try_unroll`` (each axis: none or unroll);
    ``try_vec`` (the last axis: none or vec); ``try_unroll_vec`` (each axis but the last:
    none or unroll; the last: none, unroll or vec); ``try_parallel`` (the first axis: none
    or parallel); ``candidate`` (``candidate=[["none", "vec"], ...]``)."""

    kind = "annotate"
    POLICIES = ("try_unroll", "try_vec", "try_unroll_vec", "try_parallel", "candidate")

    def __init__(self, axes, policy: str = "try_unroll", **kwargs):
        n = len(axes)
        self.policy, self.num_axes = policy, n
        none = ["none"]
        if policy == "try_unroll":
            choices = [["none", "unroll"]] * n
        elif policy == "try_vec":
            choices = [none] * (n - 1) + [["none", "vec"]]
        elif policy == "try_unroll_vec":
            choices = [["none", "unroll"]] * (n - 1) + [["none", "unroll", "vec"]]
        elif policy == "try_parallel":
            choices = [["none", "parallel"]] + [none] * (n - 1)
        elif policy == "candidate":
            cands = [list(c) for c in kwargs["candidate"]]
            if any(len(c) != n for c in cands):
                raise ValueError("define_annotate: each candidate needs one annotation per axis")
            self.entities = [AnnotateEntity(c) for c in cands]
            return
        else:
            raise ValueError(f"define_annotate: unknown policy {policy!r}; use one of "
                             f"{', '.join(self.POLICIES)}")
        if n == 0:
            raise ValueError("define_annotate needs at least one axis")
        self.entities = [AnnotateEntity(list(p)) for p in itertools.product(*choices)]

    def fallback(self):
        return AnnotateEntity(["none"] * self.num_axes)

    def describe(self) -> str:
        return f"Annotate(policy={self.policy}, num_axes={self.num_axes})"


class OtherOptionSpace(TransformSpace):
    """The candidates of ``define_knob(name, [v0, v1, ...])``."""

    kind = "knob"

    def __init__(self, candidates):
        cands = list(candidates)
        if not cands:
            raise ValueError("define_knob needs at least one candidate")
        self.entities = [OtherOptionEntity(v) for v in cands]

    def describe(self) -> str:
        shown = ", ".join(repr(e.val) for e in self.entities[:8])
        more = ", ..." if len(self.entities) > 8 else ""
        return f"OtherOption([{shown}{more}])"


# ---------------------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------------------
class _ConfigBase:
    """What every config offers a template: define calls, knob access, flop counting."""

    is_fallback = False

    def __init__(self) -> None:
        self._entity_map: dict[str, Any] = {}
        self.flop = 0.0
        self.code_hash = None
        self.errors: list[str] = []

    # ---- define calls ----
    def define_split(self, name: str, axis, policy: str = "factors", **kwargs) -> None:
        """A knob splitting ``axis`` (see :class:`SplitSpace`)."""
        self._define(name, lambda: SplitSpace(axis, policy, **kwargs))

    def define_reorder(self, name: str, axes, policy: str = "all", **kwargs) -> None:
        """A knob ordering ``axes`` (see :class:`ReorderSpace`)."""
        self._define(name, lambda: ReorderSpace(axes, policy, **kwargs))

    def define_annotate(self, name: str, axes, policy: str = "try_unroll", **kwargs) -> None:
        """A knob annotating ``axes`` (see :class:`AnnotateSpace`)."""
        self._define(name, lambda: AnnotateSpace(axes, policy, **kwargs))

    def define_knob(self, name: str, candidates) -> None:
        """A knob taking one of ``candidates`` (``cfg[name].val``)."""
        self._define(name, lambda: OtherOptionSpace(candidates))

    def _define(self, name: str, make: Callable[[], TransformSpace]) -> None:
        raise NotImplementedError

    @staticmethod
    def axis(var) -> VirtualAxis:
        """A virtual axis of ``var``'s length, to define knobs on."""
        return VirtualAxis(var)

    reduce_axis = axis

    def add_flop(self, flop: float) -> None:
        """Add to the operation count used to report GFLOP/s."""
        self.flop += float(flop)

    def raise_error(self, msg: str) -> None:
        """Reject this config (it is recorded as an instantiation error)."""
        self.errors.append(msg)
        raise InstantiationError(msg)

    def valid(self) -> bool:
        return not self.errors

    def __getitem__(self, name: str):
        try:
            return self._entity_map[name]
        except KeyError:
            raise KeyError(f"config has no knob {name!r} (knobs: "
                           f"{', '.join(self._entity_map) or 'none'}); define it first") from None

    def __contains__(self, name: str) -> bool:
        return name in self._entity_map

    def get_other_option(self) -> dict[str, Any]:
        return {k: e.val for k, e in self._entity_map.items()
                if isinstance(e, OtherOptionEntity)}


class ConfigSpace(_ConfigBase):
    """The space of a template: its knobs in definition order (``space_map``)."""

    def __init__(self) -> None:
        super().__init__()
        self.space_map: dict[str, TransformSpace] = {}

    def _define(self, name, make) -> None:
        if name in self.space_map:
            raise ValueError(f"knob {name!r} is defined twice in this template")
        space = make()
        self.space_map[name] = space
        self._entity_map[name] = space[0]

    @property
    def dims(self) -> list[int]:
        return [len(s) for s in self.space_map.values()]

    def __len__(self) -> int:
        return math.prod(self.dims)

    def knob_indices(self, index: int) -> list[int]:
        """The choice of each knob in config ``index`` (first knob = lowest digit)."""
        if not 0 <= index < len(self):
            raise IndexError(f"config index {index} out of range [0, {len(self)})")
        out = []
        for d in self.dims:
            out.append(index % d)
            index //= d
        return out

    def index_of(self, knobs: Sequence[int]) -> int:
        index = 0
        for k, d in zip(reversed(list(knobs)), reversed(self.dims), strict=True):
            index = index * d + int(k)
        return index

    def get(self, index: int) -> ConfigEntity:
        """Config number ``index``."""
        ks = self.knob_indices(int(index))
        entities = {name: space[k] for (name, space), k in zip(self.space_map.items(), ks,
                                                                strict=True)}
        return ConfigEntity(int(index), self.code_hash, entities, self)

    def knob_feature(self, index: int) -> list[float]:
        """Numbers describing config ``index`` knob by knob (the "knob" feature): log2 of
        each split factor, the choice number of other knobs (and a numeric knob's value)."""
        feats: list[float] = []
        for (_, space), k in zip(self.space_map.items(), self.knob_indices(index),
                                 strict=True):
            e = space[k]
            if isinstance(e, SplitEntity):
                feats += [math.log2(f) for f in e.size[1:]]
            else:
                feats.append(float(k))
                if isinstance(e, OtherOptionEntity) and isinstance(e.val, int | float) \
                        and not isinstance(e.val, bool):
                    feats.append(float(e.val))
        return feats

    def __iter__(self):
        return (self.get(i) for i in range(len(self)))

    def __repr__(self) -> str:
        lines = [f"ConfigSpace (len={len(self)}, space_map=)"]
        for i, (name, space) in enumerate(self.space_map.items()):
            lines.append(f"  {i:2d} {name}: {space.describe()} len={len(space)}")
        return "\n".join(lines)


class ConfigEntity(_ConfigBase):
    """One point of a space: ``cfg["tile_x"]`` is the chosen candidate of that knob."""

    def __init__(self, index: int, code_hash, entity_map: dict[str, Any],
                 space: ConfigSpace | None = None):
        super().__init__()
        self.index = index
        self.code_hash = code_hash
        self._entity_map = dict(entity_map)
        self._space = space

    def _define(self, name, make) -> None:
        if name not in self._entity_map:
            raise KeyError(f"the template defines knob {name!r}, which this config does not "
                           "have (a config from another version of the template?)")

    def to_json_dict(self) -> dict:
        return {"index": self.index, "code_hash": self.code_hash,
                "entity": [[k, e.kind, e.value] for k, e in self._entity_map.items()]}

    @staticmethod
    def from_json_dict(d: dict) -> ConfigEntity:
        entities = {k: entity_from_json(kind, v) for k, kind, v in d["entity"]}
        return ConfigEntity(int(d["index"]), d.get("code_hash"), entities)

    def __eq__(self, other) -> bool:
        return isinstance(other, ConfigEntity) and self._entity_map == other._entity_map

    def __hash__(self) -> int:
        return hash(tuple(self._entity_map.items()))

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k}={e!r}" for k, e in self._entity_map.items())
        return f"[{knobs}],index={self.index}"


class FallbackConfigEntity(_ConfigBase):
    """The config used when nothing was tuned for a workload: every knob takes its safe
    default, unless set beforehand (``cfg["tile_x"] = SplitEntity([-1, 8])``)."""

    is_fallback = True

    def __init__(self) -> None:
        super().__init__()
        self.index = -1

    def _define(self, name, make) -> None:
        if name not in self._entity_map:
            self._entity_map[name] = make().fallback()

    def __setitem__(self, name: str, entity) -> None:
        if not hasattr(entity, "kind") or entity.kind not in _ENTITY_KINDS:
            raise TypeError("a fallback knob must be a SplitEntity, ReorderEntity, "
                            "AnnotateEntity or OtherOptionEntity")
        self._entity_map[name] = entity

    def fallback_split(self, name: str, constraints: Sequence[int], length: int) -> None:
        """Set split ``name`` of a loop of ``length`` to the largest inner factors not above
        ``constraints`` (innermost last) that divide the length exactly."""
        sizes = []
        rest = int(length)
        for cap in reversed(list(constraints[1:])):
            f = max(d for d in _divisors(rest) if d <= max(1, cap))
            sizes.append(f)
            rest //= f
        self._entity_map[name] = SplitEntity([-1, *reversed(sizes)])

    def to_json_dict(self) -> dict:
        return {"index": -1, "code_hash": None,
                "entity": [[k, e.kind, e.value] for k, e in self._entity_map.items()]}

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k}={e!r}" for k, e in self._entity_map.items())
        return f"[{knobs}],fallback"
