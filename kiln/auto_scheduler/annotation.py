"""Random annotation of a sketch and the mutations of the evolutionary search.

A sketch's open choices are its tile sizes (each ``SplitStep`` with open lengths: a
factorization of the loop's extent, outermost first, the innermost at most
:data:`MAX_INNERMOST_FACTOR`) and its unroll limits (:data:`UNROLL_CHOICES`). A
:class:`Candidate` holds one choice for each; :meth:`Candidate.state` fills the sketch with
them. Tile sizes always divide the extent exactly, so no candidate has loop tails.
:func:`candidate_of` goes back: the candidate a logged state was made from.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, replace

from .loop_state import PragmaStep, SplitStep, State
from .sketch import Sketch

__all__ = ["Candidate", "sample_candidate", "mutate", "factorizations", "candidate_of"]

#: the largest innermost tile (Ansor's ``max_innermost_split_factor``)
MAX_INNERMOST_FACTOR = 64
#: the values of ``auto_unroll_max_step`` the search picks from (Ansor's CPU choices)
UNROLL_CHOICES = (0, 16, 64, 512)


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
        for i, value in self.unrolls.items():
            steps[i] = replace(steps[i], value=value)
        return State(steps)

    def key(self) -> tuple:
        return (self.sketch, tuple(sorted(self.tiles.items())),
                tuple(sorted(self.unrolls.items())))


def _open_splits(sketch: Sketch) -> list[int]:
    return [i for i, s in enumerate(sketch.steps) if isinstance(s, SplitStep)
            and None in s.lengths and i not in sketch.follows]


def _open_pragmas(sketch: Sketch) -> list[int]:
    return [i for i, s in enumerate(sketch.steps) if isinstance(s, PragmaStep)
            and s.value is None]


def sample_candidate(sketches: list[Sketch], rng: random.Random) -> Candidate:
    """A uniformly random sketch with uniformly random tile sizes and unroll limits."""
    k = rng.randrange(len(sketches))
    sk = sketches[k]
    tiles = {i: rng.choice(factorizations(sk.steps[i].extent, len(sk.steps[i].lengths) + 1))
             for i in _open_splits(sk)}
    unrolls = {i: rng.choice(UNROLL_CHOICES) for i in _open_pragmas(sk)}
    return Candidate(k, tiles, unrolls)


def mutate(c: Candidate, rng: random.Random) -> Candidate:
    """One change: move a prime factor of one tile level to another level of the same
    split (Ansor's tile-size mutation), or, one time in five, re-draw an unroll limit."""
    if c.unrolls and (not c.tiles or rng.random() < 0.2):
        i = rng.choice(sorted(c.unrolls))
        return replace(c, unrolls={**c.unrolls, i: rng.choice(UNROLL_CHOICES)})
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
