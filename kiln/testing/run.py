"""``tvm.testing.main()``: run pytest on the test file that calls it."""

from __future__ import annotations

import inspect
import sys

__all__ = ["main"]


def main() -> None:
    """Run pytest on the calling file with this process's command-line arguments, and exit
    with its status: ``if __name__ == "__main__": tvm.testing.main()``."""
    import pytest

    caller = inspect.getsourcefile(sys._getframe(1))
    sys.exit(pytest.main([str(caller), *sys.argv[1:]]))
