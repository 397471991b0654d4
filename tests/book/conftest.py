"""Shared fixtures for the book's programs (tests/book)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def normalize(text: str) -> str:
    """Collapse all runs of whitespace to one space, so assertions ignore layout."""
    return " ".join(text.split())


@pytest.fixture
def lower_text() -> Callable:
    """``lower_text(s, args)``: ``str(tvm.lower(s, args, simple_mode=True))``, whitespace-
    normalized. Assertions on it should use structural substrings, not whole programs."""
    import kiln

    def _lower(s, args) -> str:
        return normalize(str(kiln.lower(s, args, simple_mode=True)))

    return _lower


@pytest.fixture
def kiln_env() -> dict[str, str]:
    """Environment for a child Python process that must import this checkout's kiln."""
    env = dict(os.environ)
    parts = [str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env
