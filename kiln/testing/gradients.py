"""``check_numerical_grads``: gradients checked against finite differences (TVM's helper).

Each partial derivative is first estimated by a forward difference; where that disagrees
with the given gradient, by a central difference, then by the five-point formula (central
differences at ``delta`` and ``delta / 2`` combined). A gradient passes when the distance
between the two arrays is at most ``atol * sqrt(n) + rtol * |numerical|`` (``n`` elements),
so a few imprecise entries of a large gradient do not fail it; the error message lists the
positions that disagree individually.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

__all__ = ["check_numerical_grads"]


def check_numerical_grads(function: Callable, input_values: Mapping | Sequence,
                          grad_values: Mapping | Sequence, function_value: float | None = None,
                          delta: float = 1e-3, atol: float = 1e-2, rtol: float = 0.1) -> None:
    """Assert that ``grad_values`` are the gradients of the scalar ``function`` at
    ``input_values``.

    ``input_values`` and ``grad_values`` are both lists of numpy arrays (``function`` then
    takes them positionally) or both dicts by name (``function`` takes keyword arguments);
    ``function_value`` is ``function`` at ``input_values`` when already known. ``delta`` is
    the finite-difference step (1e-3 suits float32), ``atol`` is scaled by the square root of
    each gradient's size. Raises AssertionError on a mismatch or a shape difference,
    ValueError when the numerical gradient is not finite.
    """
    call, inputs, grads = _by_name(function, input_values, grad_values)
    if function_value is None:
        function_value = call(inputs)
    for name, grad in grads.items():
        grad = np.asarray(grad)
        if grad.shape != inputs[name].shape:
            raise AssertionError(f"gradient wrt '{name}' has shape {grad.shape}, expected "
                                 f"{inputs[name].shape}")
        numerical, wrong = _numerical_gradient(call, inputs, name, grad, function_value,
                                               delta, atol, rtol)
        _compare(name, grad, numerical, wrong, atol, rtol)


def _by_name(function: Callable, input_values, grad_values):
    """A call taking a dict of inputs, the inputs and the gradients by name."""
    if isinstance(input_values, Mapping):
        inputs = {k: np.asarray(v) for k, v in input_values.items()}
        return (lambda values: function(**values)), inputs, dict(grad_values)
    names = [str(k) for k in range(len(input_values))]
    inputs = {n: np.asarray(v) for n, v in zip(names, input_values, strict=True)}
    grads = dict(zip(names, grad_values, strict=True))
    return (lambda values: function(*(values[n] for n in names))), inputs, grads


def _numerical_gradient(call: Callable, inputs: dict, name: str, grad: np.ndarray,
                        value: float, delta: float, atol: float, rtol: float):
    """The finite-difference gradient wrt ``inputs[name]`` and the positions where it still
    disagrees with ``grad`` after the most precise estimate."""
    def difference(j: int, step: float) -> float:
        moved = inputs[name].copy()
        moved.reshape(-1)[j] += step
        return (call({**inputs, name: moved}) - value) / step

    def close(j: int, estimate: float) -> bool:
        return abs(estimate - grad.reshape(-1)[j]) < atol + rtol * abs(estimate)

    numerical = np.zeros(grad.shape, dtype="float64")
    wrong = []
    for j in range(grad.size):
        estimate = difference(j, delta)
        if not close(j, estimate):
            estimate = (estimate + difference(j, -delta)) / 2
        if not close(j, estimate):
            half = (difference(j, delta / 2) + difference(j, -delta / 2)) / 2
            estimate = (4 * half - estimate) / 3
        if not close(j, estimate):
            wrong.append(np.unravel_index(j, grad.shape))
        numerical.reshape(-1)[j] = estimate
    return numerical, wrong


def _compare(name: str, grad: np.ndarray, numerical: np.ndarray, wrong: list,
             atol: float, rtol: float) -> None:
    distance = float(np.sqrt(np.sum((numerical - grad) ** 2)))
    norm = float(np.sqrt(np.sum(numerical ** 2)))
    if not (np.isfinite(distance) and np.isfinite(norm)):
        raise ValueError(f"NaN or infinity in the numerical gradient wrt '{name}'\n"
                         f"analytical: {grad}\nnumerical: {numerical}")
    limit = atol * np.sqrt(grad.size) + rtol * norm
    if distance > limit:
        share = 100 * len(wrong) // max(grad.size, 1)
        raise AssertionError(
            f"analytical and numerical gradients wrt '{name}' differ: distance {distance:g} > "
            f"atol*sqrt(n) + rtol*|numerical| = {limit:g}; {share}% of the elements differ, "
            f"first positions: {wrong[:10]}\nanalytical: {grad}\nnumerical: {numerical}")
