"""Reverse-mode automatic differentiation of tensor expressions (``tvm.te.gradient``).

- :mod:`.gradient` — ``gradient``: the walk back over the operation DAG (the chain rule);
- :mod:`.adjoint` — one stage's vector-Jacobian product, in gather form;
- :mod:`.index_solve` — solving a load's index equations for the loop variables;
- :mod:`.derivative` — symbolic partial derivatives of scalar expressions;
- :mod:`.jacobian` — the dense Jacobian of a reduction with any other reducer.

docs/autodiff.md describes the method and what is differentiated.
"""

from .gradient import gradient

__all__ = ["gradient"]
