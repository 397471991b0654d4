"""kiln.vta: a VTA-style deep-learning accelerator target (``import vta`` under the alias).

``get_env()`` describes the hardware (docs/vta.md); ``vta.build``/``vta.lower`` compile a
schedule whose stages live in the accelerator's buffers (``env.inp_scope`` ...) into VTA
instructions; ``vta.testing.simulator`` runs them bit-exactly and counts their cycles.
Arrays live on ``kiln.ext_dev(0)``, the simulator's DRAM.
"""

from . import isa, simulator, testing
from .build_module import build, build_config, lower
from .env import DEFAULT_CONFIG, Environment, get_env, set_env
from .runtime import VTAModule, register

register()

__all__ = ["Environment", "DEFAULT_CONFIG", "get_env", "set_env", "build", "build_config",
           "lower", "VTAModule", "isa", "simulator", "testing"]
