"""``vta.testing``: the simulator (``vta.testing.simulator``) and test helpers."""

from .. import simulator

__all__ = ["simulator"]
