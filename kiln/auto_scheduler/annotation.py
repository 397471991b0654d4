"""Random annotation of a sketch and the mutations of the evolutionary search.

A sketch's open choices are its tile sizes (each ``SplitStep`` with open lengths: a
factorization of the loop's extent, outermost first, the innermost at most
:data:`MAX_INNERMOST_FACTOR`) and its unroll limits (the sketch's ``unroll_choices``). A
:class:`Candidate` holds one choice for each; :meth:`Candidate.state` fills the sketch with
them. The one exception to exact factorizations is a vectorized innermost tile: it may also
be a power of two of whole vectors that does not divide the loop (:func:`tail_tilings`:
4 of a conv's 14 columns, as the hand schedules block them), the outer levels then factoring
the tiles (partial one included) and the split running the remainder with a tail strategy
(:func:`tail_strategy`), which the state's ``SplitStep.tail`` records.
:func:`candidate_of` goes back: the candidate a logged state was made from.

The evolutionary search changes candidates two ways: :func:`mutate` moves one prime factor
between two levels of a split (or re-draws an unroll limit, or a vectorized split's tiling
between exact and tail ones), :func:`crossover` (Ansor's)
makes a child of two candidates of one sketch that takes each stage's choices from one
of them. A crossover child can combine choices that do not replay together; the search
keeps only children whose state replays (:meth:`SketchPolicy.evolutionary_search`).
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, replace

from .loop_state import PragmaStep, SplitStep, State, has_tail
from .sketch import Sketch

__all__ = ["Candidate", "sample_candidate", "mutate", "crossover", "factorizations",
           "tail_tilings", "candidate_of"]

#: the largest innermost tile (Ansor's ``max_innermost_split_factor``)
MAX_INNERMOST_FACTOR = 64
#: how often :func:`sample_candidate` draws tile sizes before giving up on the limits
MAX_SAMPLE_TRIES = 1000
#: how often a draw or mutation of a vectorized split takes a tail tiling where it has one
TAIL_SHARE = 0.5


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
            steps[i] = _with_lengths(sketch, steps[i], tuple(full[1:]))
        for i, src in sketch.follows.items():
            steps[i] = _with_lengths(sketch, steps[i], (self.tiles[src][-1],))
        for i, refs in sketch.fused_follows.items():
            steps[i] = _with_lengths(sketch, steps[i], (math.prod(self.tiles[j][level]
                                                                  for j, level in refs),))
        for i, value in self.unrolls.items():
            steps[i] = replace(steps[i], value=value)
        return State(steps)

    def key(self) -> tuple:
        return (self.sketch, tuple(sorted(self.tiles.items())),
                tuple(sorted(self.unrolls.items())))


def tail_strategy(sketch: Sketch, step: SplitStep) -> str:
    """How a split of ``sketch`` whose tile does not divide its constant loop runs the
    remainder: its last tile shifted inwards over the previous one (one loop nest, every
    tile whole vectors) on a stage that computes each element once
    (:attr:`Sketch.pure_stages`); else guard-free whole tiles and one nest for the rest
    (``partition``: a reduction must not accumulate an element twice)."""
    return "shift_inwards" if step.stage in sketch.pure_stages else "partition"


def _with_lengths(sketch: Sketch, step: SplitStep, lengths: tuple[int, ...]) -> SplitStep:
    """``step`` of ``sketch`` with ``lengths`` and, where one does not divide its loop,
    its :func:`tail_strategy`."""
    return replace(step, lengths=lengths,
                   tail=tail_strategy(sketch, step) if has_tail(step.extent, lengths) else None)


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


@functools.cache
def tail_lengths(extent: int, lanes: int) -> tuple[int, ...]:
    """The vectorized innermost lengths that do not divide ``extent``: powers of two from
    one vector of ``lanes`` (from half the largest power of two within a shorter extent:
    4 and 8 of 14 columns at 16 lanes) up to ``extent`` and :data:`MAX_INNERMOST_FACTOR`."""
    below = 1 << (extent.bit_length() - 1)
    length, out = min(lanes, max(below // 2, 2)), []
    while length <= min(extent, MAX_INNERMOST_FACTOR):
        if extent % length:
            out.append(length)
        length *= 2
    return tuple(out)


@functools.cache
def tail_tilings(extent: int, parts: int, lanes: int) -> tuple[tuple[int, ...], ...]:
    """The ``parts``-level tilings of ``extent`` whose innermost is a :func:`tail_lengths`
    length (a partial last tile) and whose outer levels factor the number of its tiles."""
    if parts < 2:
        return ()
    return tuple((*outer, length) for length in tail_lengths(extent, lanes)
                 for outer in factorizations(-(-extent // length), parts - 1))


def vector_tiling(extent: int, parts: int, lanes: int, rng: random.Random
                  ) -> tuple[int, ...]:
    """A random tiling of a vectorized split: one of :func:`aligned_factorizations`, or
    (a share :data:`TAIL_SHARE`, where the extent has them) of :func:`tail_tilings`."""
    tails = tail_tilings(extent, parts, lanes)
    if tails and rng.random() < TAIL_SHARE:
        return rng.choice(tails)
    return rng.choice(aligned_factorizations(extent, parts, lanes))


def sample_candidate(sketches: list[Sketch], rng: random.Random, filled: bool = False
                     ) -> Candidate:
    """A uniformly random sketch with uniformly random tile sizes (the innermost of a
    vectorized loop whole vectors: :func:`vector_tiling`) and unroll
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
    tiles = {i: _draw_tiling(sk, i, rng) for i in _open_splits(sk)}
    return tiles, {i: rng.choice(sk.unroll_choices) for i in _open_pragmas(sk)}


def _draw_tiling(sk: Sketch, i: int, rng: random.Random) -> tuple[int, ...]:
    """Random tile sizes of open split ``i`` of ``sk``."""
    step = sk.steps[i]
    if i in sk.vector_lanes:
        return vector_tiling(step.extent, len(step.lengths) + 1, sk.vector_lanes[i], rng)
    return rng.choice(factorizations(step.extent, len(step.lengths) + 1))


def mutate(c: Candidate, rng: random.Random, sketch: Sketch) -> Candidate:
    """One change: move a prime factor of one tile level to another level of the same
    split (Ansor's tile-size mutation; of a tiling with a partial tile, between its outer
    levels), or, one time in five, re-draw an unroll limit from the unroll choices of
    ``sketch`` (``c``'s), or the tiling of a vectorized split that has tail tilings."""
    if c.unrolls and (not c.tiles or rng.random() < 0.2):
        i = rng.choice(sorted(c.unrolls))
        return replace(c, unrolls={**c.unrolls, i: rng.choice(sketch.unroll_choices)})
    if not c.tiles:
        return c
    i = rng.choice(sorted(c.tiles))
    step, full = sketch.steps[i], list(c.tiles[i])
    if i in sketch.vector_lanes and \
            tail_tilings(step.extent, len(full), sketch.vector_lanes[i]) and rng.random() < 0.2:
        return replace(c, tiles={**c.tiles, i: _draw_tiling(sketch, i, rng)})
    movable = len(full) - 1 if math.prod(full) != step.extent else len(full)
    sources = [k for k, f in enumerate(full[:movable]) if f > 1]
    if not sources or movable < 2:
        return c
    src = rng.choice(sources)
    dst = rng.choice([k for k in range(movable) if k != src])
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
        tiles = {i: (-(-sk.steps[i].extent // math.prod(steps[i].lengths)),
                     *steps[i].lengths) for i in splits}
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
