"""Test-wide setup: a private compile cache, golden-file support, GPU skipping."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"

# Every test session compiles into its own cache so runs never share stale objects.
os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-test-cache-"))


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
