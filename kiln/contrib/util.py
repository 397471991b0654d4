"""``tvm.contrib.util``: the pre-0.8 name of :mod:`kiln.contrib.utils`."""

from .utils import TempDirectory, tempdir

__all__ = ["TempDirectory", "tempdir"]
