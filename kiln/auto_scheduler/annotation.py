"""Random annotation of a sketch and the mutations of the evolutionary search.

A sketch's open choices are its tile sizes (each ``SplitStep`` with open lengths: a
factorization of the loop's extent, outermost first, the innermost at most
:data:`MAX_INNERMOST_FACTOR`) and its unroll limits (the sketch's ``unroll_choices``). A
:class:`Candidate` holds one choice for each; :meth:`Candidate.state` fills the sketch with
them. Tile sizes always divide the extent exactly, so no candidate has loop tails.
:func:`candidate_of` goes back: the candidate a logged state was made from.

The evolutionary search changes candidates two ways: :func:`mutate` moves one prime factor
between two levels of a split (or re-draws an unroll limit), :func:`crossover` (Ansor's)
makes a child of two candidates of one sketch that takes each stage's choices from one
of them. A crossover child can combine choices that do not replay together; the search
keeps only children whose state replays (:meth:`SketchPolicy.evolutionary_search`).
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, replace

from .loop_state import PragmaStep, SplitStep, State
from .sketch import UNROLL_CHOICES, Sketch

__all__ = ["Candidate", "sample_candidate", "mutate", "crossover", "factorizations",
           "candidate_of"]

#: the largest innermost tile (Ansor's ``max_innermost_split_factor``)
MAX_INNERMOST_FACTOR = 64
#: how often :func:`sample_candidate` draws tile sizes before giving up on the limits
MAX_SAMPLE_TRIES = 1000


@functools.cache
def factorizations(extent: int, parts: int) -> tuple[tuple[int, ...], ...]:
    """Every ordered ``parts``-tuple of positive integers whose product is ``extent`` and
    whose last entry is at most :data:`MAX_INNERMOST_FACTOR` (for ``parts > 1``)."""
    if parts == 1:
        return ((extent,),)
    out = []
    for d in range(1, extent + 1):
        if extent % d == 0:
            out.extend((d, *rest) for rest in factorizations(extent // d, parts - 1))
    return tuple(f for f in out if f[-1] <= MAX_INNERMOST_FACTOR)


@dataclass(frozen=True)
class Candidate:
    """A sketch (by index into the search's sketches) with its choices: ``tiles[i]`` the
    full factorization (outermost first) of open split step ``i``, ``unrolls[i]`` the
    value of open pragma step ``i``."""

    sketch: int
    tiles: dict
    unrolls: dict

    def state(self, sketch: Sketch) -> State:
        """The sketch's steps with this candidate's choices filled in."""
        steps = list(sketch.steps)
        for i, full in self.tiles.items():
            steps[i] = replace(steps[i], lengths=tuple(full[1:]))
        for i, src in sketch.follows.items():
            inner = self.tiles[src][-1]
            steps[i] = replace(steps[i], lengths=(inner,))
        for i, refs in sketch.fused_follows.items():
            steps[i] = replace(steps[i], lengths=(math.prod(self.tiles[j][level]
                                                            for j, level in refs),))
        for i, value in self.unrolls.items():
            steps[i] = replace(steps[i], value=value)
        return State(steps)

    def key(self) -> tuple:
        return (self.sketch, tuple(sorted(self.tiles.items())),
                tuple(sorted(self.unrolls.items())))


def _open_splits(sketch: Sketch) -> list[int]:
    return [i for i, s in enumerate(sketch.steps) if isinstance(s, SplitStep)
            and None in s.lengths and i not in sketch.follows
            and i not in sketch.fused_follows]


def _open_pragmas(sketch: Sketch) -> list[int]:
    return [i for i, s in enumerate(sketch.steps) if isinstance(s, PragmaStep)
            and s.value is None]


@functools.cache
def aligned_factorizations(extent: int, parts: int, lanes: int) -> tuple[tuple[int, ...], ...]:
    """The :func:`factorizations` whose innermost entry is a multiple of ``lanes`` (a
    vectorized loop of whole vectors); where none is, those of at least half a vector (a
    conv's 14 columns of 16 lanes); else all of them."""
    every = factorizations(extent, parts)
    return (tuple(f for f in every if f[-1] % lanes == 0)
            or tuple(f for f in every if 2 * f[-1] >= lanes) or every)


def sample_candidate(sketches: list[Sketch], rng: random.Random, filled: bool = False
                     ) -> Candidate:
    """A uniformly random sketch with uniformly random tile sizes (the innermost of a
    vectorized loop a multiple of the vector lanes where the extent allows) and unroll
    limits, drawn again until they keep the sketch's limits; ``filled``: until they also
    reach its floors (:meth:`Sketch.fills`), where some of :data:`MAX_SAMPLE_TRIES` draws
    do."""
    k = rng.randrange(len(sketches))
    sk = sketches[k]
    draws = (_draw(sk, rng) for _ in range(MAX_SAMPLE_TRIES))
    kept = (d for d in draws if sk.allows(*d))
    first = next(kept, None)
    if first is None:
        raise RuntimeError(f"auto_scheduler: no tile sizes of sketch {sk} within its limits "
                           f"in {MAX_SAMPLE_TRIES} draws")
    if filled and not sk.fills(first[0]):
        first = next((d for d in kept if sk.fills(d[0])), first)
    return Candidate(k, *first)


def _draw(sk: Sketch, rng: random.Random) -> tuple[dict, dict]:
    """Random tile sizes and unroll limits of the open steps of ``sk``."""
    tiles = {i: rng.choice(aligned_factorizations(sk.steps[i].extent,
                                                  len(sk.steps[i].lengths) + 1,
                                                  sk.vector_lanes.get(i, 1)))
             for i in _open_splits(sk)}
    return tiles, {i: rng.choice(sk.unroll_choices) for i in _open_pragmas(sk)}


def mutate(c: Candidate, rng: random.Random,
           unroll_choices: tuple[int, ...] = UNROLL_CHOICES) -> Candidate:
    """One change: move a prime factor of one tile level to another level of the same
    split (Ansor's tile-size mutation), or, one time in five, re-draw an unroll limit from
    ``unroll_choices`` (its sketch's)."""
    if c.unrolls and (not c.tiles or rng.random() < 0.2):
        i = rng.choice(sorted(c.unrolls))
        return replace(c, unrolls={**c.unrolls, i: rng.choice(unroll_choices)})
    if not c.tiles:
        return c
    i = rng.choice(sorted(c.tiles))
    full = list(c.tiles[i])
    sources = [k for k, f in enumerate(full) if f > 1]
    if not sources or len(full) < 2:
        return c
    src = rng.choice(sources)
    dst = rng.choice([k for k in range(len(full)) if k != src])
    p = _smallest_prime_factor(full[src])
    full[src] //= p
    full[dst] *= p
    if full[-1] > MAX_INNERMOST_FACTOR:
        return c
    return replace(c, tiles={**c.tiles, i: tuple(full)})


def crossover(a: Candidate, b: Candidate, sketch: Sketch, rng: random.Random) -> Candidate:
    """A child of ``a`` and ``b`` (candidates of ``sketch``): for each stage, every tile
    size and unroll limit of that stage comes from one parent drawn at random (Ansor's
    crossover, which keeps each stage's decisions together)."""
    if a.sketch != b.sketch:
        raise ValueError(f"crossover: parents of sketches {a.sketch} and {b.sketch}; "
                         f"crossover combines candidates of one sketch")
    stages = sorted({sketch.steps[i].stage for i in (*a.tiles, *a.unrolls)})
    from_b = {s for s in stages if rng.random() < 0.5}

    def parent(i: int) -> Candidate:
        return b if sketch.steps[i].stage in from_b else a

    return Candidate(a.sketch, {i: parent(i).tiles[i] for i in a.tiles},
                     {i: parent(i).unrolls[i] for i in a.unrolls})


def candidate_of(sketches: list[Sketch], state: State) -> Candidate | None:
    """The candidate whose :meth:`Candidate.state` is ``state`` (a state logged by an
    earlier search of the same DAG), or None when no sketch has its steps."""
    steps = state.steps
    for k, sk in enumerate(sketches):
        splits, pragmas = _open_splits(sk), _open_pragmas(sk)
        if (len(sk.steps) != len(steps)
                or not all(isinstance(steps[i], SplitStep) for i in splits)
                or not all(isinstance(steps[i], PragmaStep) for i in pragmas)):
            continue
        tiles = {i: (sk.steps[i].extent // math.prod(steps[i].lengths), *steps[i].lengths)
                 for i in splits}
        c = Candidate(k, tiles, {i: steps[i].value for i in pragmas})
        if c.state(sk).key() == state.key():
            return c
    return None


def _smallest_prime_factor(n: int) -> int:
    d = 2
    while d * d <= n:
        if n % d == 0:
            return d
        d += 1
    return n
