"""``tvm.contrib.nvcc``: compile CUDA C to PTX or a cubin, and the compute-capability facts
schedules ask about.

kiln compiles CUDA through NVRTC (:func:`kiln.runtime.cuda_driver.compile_cuda`, cached on
disk), so no ``nvcc`` binary is needed. ``parse_compute_version``, ``have_fp16``,
``have_int8``, ``have_tensorcore`` and ``have_bf16`` are pure functions of a compute version
string such as ``"8.0"``, with classic TVM's answers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from kiln.errors import TVMError
from kiln.runtime import cuda_driver
from kiln.target.target import Target

__all__ = ["compile_cuda", "get_target_compute_version", "parse_compute_version",
           "have_fp16", "have_int8", "have_tensorcore", "have_bf16"]


def compile_cuda(code: str, target_format: str = "ptx", arch: str | Sequence[str] | None = None,
                 options: str | Sequence[str] | None = None,
                 path_target: str | None = None) -> bytearray:
    """Compile CUDA C ``code`` to ``"ptx"`` or ``"cubin"`` for ``arch`` (``"sm_80"``; by
    default the current target's ``-arch`` or the GPU's). Writes the result to
    ``path_target`` too when given. Raises kiln.CompileError with NVRTC's log."""
    if target_format not in ("ptx", "cubin"):
        raise ValueError(f"compile_cuda: target_format must be 'ptx' or 'cubin' (NVRTC makes "
                         f"no {target_format!r}), got {target_format!r}")
    if arch is None:
        arch = "sm_" + get_target_compute_version().replace(".", "")
    elif not isinstance(arch, str):
        if len(arch) != 1:
            raise ValueError("compile_cuda: NVRTC compiles for one arch at a time")
        arch = arch[0]
    opts = [options] if isinstance(options, str) else list(options or ())
    data = cuda_driver.compile_cuda(code, arch, target_format, opts)
    if path_target is not None:
        with open(os.fspath(path_target), "wb") as f:
            f.write(data)
    return bytearray(data)


def get_target_compute_version(target: Target | str | None = None) -> str:
    """The compute version (``"8.0"``) of ``target``'s ``-arch``, else of the current
    target's, else of GPU 0. Raises TVMError when none of them says."""
    for t in (target, Target.current()):
        arch = Target(t).attrs.get("arch", "") if t is not None else ""
        if arch.startswith("sm_"):
            return _compute_version(arch)
    try:
        return _compute_version(cuda_driver.device_arch())
    except TVMError as e:
        raise TVMError("no CUDA compute version: give a target with -arch=sm_XY "
                       f"(e.g. tvm.target.cuda(arch='sm_80')) or run on a GPU ({e})") from None


def _compute_version(arch: str) -> str:
    """``"sm_86"`` → ``"8.6"``."""
    digits = arch.split("_", 1)[1]
    return f"{digits[:-1]}.{digits[-1]}"


def parse_compute_version(compute_version: str) -> tuple[int, int]:
    """``"8.6"`` → ``(8, 6)``. Raises RuntimeError on anything else."""
    try:
        major, minor = str(compute_version).split(".")
        return int(major), int(minor)
    except ValueError as err:
        raise RuntimeError(f"Compute version parsing error: {err}") from None


def have_fp16(compute_version: str) -> bool:
    """Whether the GPU has fast float16 arithmetic (compute 5.3, or 6.0 and later)."""
    major, minor = parse_compute_version(compute_version)
    return (major, minor) == (5, 3) or major >= 6


def have_int8(compute_version: str) -> bool:
    """Whether the GPU has int8 arithmetic (compute 6.0 and later, as classic TVM says)."""
    return parse_compute_version(compute_version)[0] >= 6


def have_tensorcore(compute_version: str | None = None,
                    target: Target | str | None = None) -> bool:
    """Whether the GPU has tensor cores (compute 7.0 and later); ``False`` when neither a
    version nor a target/GPU tells."""
    if compute_version is None:
        try:
            compute_version = get_target_compute_version(target)
        except TVMError:
            return False
    return parse_compute_version(compute_version)[0] >= 7


def have_bf16(compute_version: str) -> bool:
    """Whether the GPU has bfloat16 arithmetic (compute 8.0 and later)."""
    return parse_compute_version(compute_version)[0] >= 8
