"""The compiler driver: ``lower`` and ``build``."""

from .build import build
from .lower import lower

__all__ = ["build", "lower"]
