"""The VTA hardware configuration (``vta.get_env()``): tensor shapes, data widths, on-chip
buffer sizes, memory scopes and the pragma names schedules use.

The default is the published design's ``vta_config.json`` (``1x16_i8w8a32``): BATCH 1,
BLOCK_IN = BLOCK_OUT = 16, int8 input and weight, int32 accumulator, int8 output, a 32 KiB
micro-op buffer, 32 KiB input, 256 KiB weight and 128 KiB accumulator buffers. A JSON file
with the same ``LOG_*`` keys overrides it: pass its path to :func:`get_env`, or set
``VTA_CONFIG`` to it. Every size is derived from the ``LOG_*`` values, as in VTA's
``pkg_config.py``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from kiln.errors import TVMError

__all__ = ["Environment", "DEFAULT_CONFIG", "get_env", "set_env"]

#: the published default configuration (VTA's vta_config.json)
DEFAULT_CONFIG: dict[str, int | str] = {
    "TARGET": "sim",
    "HW_VER": "0.0.2",
    "LOG_INP_WIDTH": 3,
    "LOG_WGT_WIDTH": 3,
    "LOG_ACC_WIDTH": 5,
    "LOG_BATCH": 0,
    "LOG_BLOCK": 4,
    "LOG_UOP_BUFF_SIZE": 15,
    "LOG_INP_BUFF_SIZE": 15,
    "LOG_WGT_BUFF_SIZE": 18,
    "LOG_ACC_BUFF_SIZE": 17,
}

_LOG_KEYS = tuple(k for k in DEFAULT_CONFIG if k.startswith("LOG_"))

#: the environment variable naming a JSON configuration file
CONFIG_ENV_VAR = "VTA_CONFIG"


@dataclass(frozen=True)
class Environment:
    """One VTA configuration. Attribute names are VTA's (``env.BATCH``, ``env.BLOCK_IN``,
    ``env.inp_dtype``, ``env.INP_ELEM_BYTES``, ``env.acc_scope`` ...)."""

    cfg: dict = field(default_factory=lambda: dict(DEFAULT_CONFIG))

    def __post_init__(self) -> None:
        missing = [k for k in _LOG_KEYS if k not in self.cfg]
        if missing:
            raise TVMError(f"VTA configuration lacks {missing}")
        if self.LOG_ACC_WIDTH != 5 or self.LOG_INP_WIDTH != 3 or self.LOG_WGT_WIDTH != 3:
            raise TVMError("kiln's VTA supports int8 inputs and weights with int32 accumulators "
                           "(LOG_INP_WIDTH = LOG_WGT_WIDTH = 3, LOG_ACC_WIDTH = 5)")

    def __getattr__(self, name: str):
        if name.startswith("LOG_") and name in self.cfg:
            return int(self.cfg[name])
        raise AttributeError(f"VTA Environment has no attribute {name!r}")

    # -- tensor shapes ------------------------------------------------------------------
    @property
    def BATCH(self) -> int:
        return 1 << self.LOG_BATCH

    @property
    def BLOCK_IN(self) -> int:
        return 1 << self.LOG_BLOCK

    @property
    def BLOCK_OUT(self) -> int:
        return 1 << self.LOG_BLOCK

    # -- data widths (bits) -----------------------------------------------------------
    @property
    def INP_WIDTH(self) -> int:
        return 1 << self.LOG_INP_WIDTH

    @property
    def WGT_WIDTH(self) -> int:
        return 1 << self.LOG_WGT_WIDTH

    @property
    def ACC_WIDTH(self) -> int:
        return 1 << self.LOG_ACC_WIDTH

    @property
    def OUT_WIDTH(self) -> int:
        return self.INP_WIDTH

    @property
    def inp_dtype(self) -> str:
        return f"int{self.INP_WIDTH}"

    @property
    def wgt_dtype(self) -> str:
        return f"int{self.WGT_WIDTH}"

    @property
    def acc_dtype(self) -> str:
        return f"int{self.ACC_WIDTH}"

    @property
    def out_dtype(self) -> str:
        return f"int{self.OUT_WIDTH}"

    # -- one tensor element ("tile") of each buffer -------------------------------------
    @property
    def INP_ELEM_BITS(self) -> int:
        return self.BATCH * self.BLOCK_IN * self.INP_WIDTH

    @property
    def WGT_ELEM_BITS(self) -> int:
        return self.BLOCK_OUT * self.BLOCK_IN * self.WGT_WIDTH

    @property
    def ACC_ELEM_BITS(self) -> int:
        return self.BATCH * self.BLOCK_OUT * self.ACC_WIDTH

    @property
    def OUT_ELEM_BITS(self) -> int:
        return self.BATCH * self.BLOCK_OUT * self.OUT_WIDTH

    @property
    def INP_ELEM_BYTES(self) -> int:
        return self.INP_ELEM_BITS // 8

    @property
    def WGT_ELEM_BYTES(self) -> int:
        return self.WGT_ELEM_BITS // 8

    @property
    def ACC_ELEM_BYTES(self) -> int:
        return self.ACC_ELEM_BITS // 8

    @property
    def OUT_ELEM_BYTES(self) -> int:
        return self.OUT_ELEM_BITS // 8

    # -- on-chip buffers ------------------------------------------------------------------
    @property
    def UOP_BUFF_SIZE(self) -> int:
        return 1 << self.LOG_UOP_BUFF_SIZE

    @property
    def INP_BUFF_SIZE(self) -> int:
        return 1 << self.LOG_INP_BUFF_SIZE

    @property
    def WGT_BUFF_SIZE(self) -> int:
        return 1 << self.LOG_WGT_BUFF_SIZE

    @property
    def ACC_BUFF_SIZE(self) -> int:
        return 1 << self.LOG_ACC_BUFF_SIZE

    @property
    def OUT_BUFF_SIZE(self) -> int:
        return self.ACC_BUFF_SIZE * self.OUT_WIDTH // self.ACC_WIDTH

    @property
    def UOP_ELEM_BYTES(self) -> int:
        return 4

    @property
    def UOP_DEPTH(self) -> int:
        """Micro-ops the micro-op buffer holds."""
        return self.UOP_BUFF_SIZE // self.UOP_ELEM_BYTES

    @property
    def INP_DEPTH(self) -> int:
        """Input tiles (``BATCH x BLOCK_IN``) the input buffer holds."""
        return self.INP_BUFF_SIZE // self.INP_ELEM_BYTES

    @property
    def WGT_DEPTH(self) -> int:
        return self.WGT_BUFF_SIZE // self.WGT_ELEM_BYTES

    @property
    def ACC_DEPTH(self) -> int:
        return self.ACC_BUFF_SIZE // self.ACC_ELEM_BYTES

    # -- what schedules name ----------------------------------------------------------------
    inp_scope = "local.inp_buffer"
    wgt_scope = "local.wgt_buffer"
    acc_scope = "local.acc_buffer"
    dma_copy = "dma_copy"
    alu = "alu"
    target = "ext_dev"
    target_host = "llvm"

    @property
    def TARGET(self) -> str:
        return str(self.cfg.get("TARGET", "sim"))

    @property
    def HW_VER(self) -> str:
        return str(self.cfg.get("HW_VER", "0.0.2"))

    @property
    def gemm(self):
        """The GEMM tensor intrinsic (``s[C].tensorize(axis, env.gemm)``)."""
        from .intrin import gemm_intrin

        return gemm_intrin(self)


_CURRENT: list[Environment | None] = [None]


def _load_config(path: str | os.PathLike[str]) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise TVMError(f"cannot read the VTA configuration {os.fspath(path)!r}: {err}") from err
    if not isinstance(data, dict):
        raise TVMError(f"the VTA configuration {os.fspath(path)!r} is not a JSON object")
    return {**DEFAULT_CONFIG, **data}


def get_env(config: str | os.PathLike[str] | dict | None = None) -> Environment:
    """The current VTA environment: the one given to :func:`set_env`, else the
    configuration ``config`` (a JSON file path or a dict of ``LOG_*`` keys), else the file
    named by ``VTA_CONFIG``, else the published default."""
    if config is None and _CURRENT[0] is not None:
        return _CURRENT[0]
    if config is None:
        config = os.environ.get(CONFIG_ENV_VAR)
    if config is None:
        return _default_env()
    if isinstance(config, dict):
        return Environment({**DEFAULT_CONFIG, **config})
    return Environment(_load_config(config))


def set_env(env: Environment | None) -> None:
    """Make ``env`` what :func:`get_env` returns (None: back to the configuration files)."""
    _CURRENT[0] = env


_DEFAULT: list[Environment] = []


def _default_env() -> Environment:
    if not _DEFAULT:
        _DEFAULT.append(Environment())
    return _DEFAULT[0]
