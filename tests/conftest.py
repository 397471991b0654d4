"""Test-wide setup: a private compile cache, the Hypothesis example budget, golden files."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

GOLDEN_DIR = Path(__file__).parent / "golden"

# Every test session compiles into its own cache so runs never share stale objects. The
# pytest-xdist workers inherit it from the controlling process, so a kernel is compiled once
# per session (the cache is safe for concurrent processes); the process that made it removes
# it at the end. A KILN_CACHE_DIR set by the user is used as it is.
_SESSION_CACHE: str | None = None
if "KILN_CACHE_DIR" not in os.environ:
    _SESSION_CACHE = os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-test-cache-")

# Hypothesis budgets: "suite" (the default) keeps every run short (an example of the schedule
# property test is a whole compile); KILN_HYPOTHESIS_PROFILE=thorough is a long fuzzing run.
settings.register_profile("suite", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", settings.get_profile("suite"), max_examples=2000)
settings.load_profile(os.environ.get("KILN_HYPOTHESIS_PROFILE") or "suite")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SESSION_CACHE is not None:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/*.txt from the current output")


@pytest.fixture
def golden(request):
    """``golden("name", text)``: compare text with tests/golden/name.txt (or rewrite it)."""
    update = request.config.getoption("--update-golden")

    def check(name: str, text: str) -> None:
        path = GOLDEN_DIR / f"{name}.txt"
        text = text.rstrip() + "\n"
        if update or not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if not update:
                pytest.skip(f"golden file {path.name} created; review it and rerun")
            return
        assert text == path.read_text(), (
            f"lowered text differs from {path}; if the change is intended, rerun with "
            f"--update-golden and review the diff")

    return check


@pytest.fixture
def register_global():
    """``register_global(name, fn)``: ``tvm.register_func`` for one test, removed after it."""
    from kiln.runtime import register_func, remove_global_func

    names: set[str] = set()

    def register(name: str, fn) -> None:
        register_func(name, fn, override=True)
        names.add(name)

    yield register
    for name in names:
        remove_global_func(name)
