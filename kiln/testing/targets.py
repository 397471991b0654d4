"""Which targets tests run on here, and the pytest marks that skip the rest.

A target is *runnable* when kiln can compile and run it on this machine: ``llvm``/``c`` (kiln's
C backend) need a C compiler, ``cuda``/``nvptx`` an NVIDIA GPU; other kinds never are. The
targets under test are those of the ``TVM_TEST_TARGETS`` environment variable
(``;``-separated, as in TVM) or, unset, :data:`DEFAULT_TEST_TARGETS`; the *enabled* targets are
the runnable ones among them (``llvm`` when none is). pytest is imported only by the functions
that make marks, so importing this module never needs it.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from typing import Any, TypeVar

import kiln

__all__ = [
    "DEFAULT_TEST_TARGETS",
    "has_gpu",
    "has_c_compiler",
    "targets_under_test",
    "enabled_targets",
    "device_enabled",
    "target_marks",
    "parametrize_targets",
    "exclude_targets",
    "known_failing_targets",
    "target_params",
    "uses_gpu",
    "requires_gpu",
    "requires_cuda",
    "requires_llvm",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Targets tested when ``TVM_TEST_TARGETS`` is unset (the kinds kiln has a backend for).
DEFAULT_TEST_TARGETS: tuple[str, ...] = ("llvm", "cuda")

_CPU_KINDS = ("llvm", "c")
_GPU_KINDS = ("cuda", "nvptx")


@functools.cache
def has_gpu() -> bool:
    """Return True when an NVIDIA GPU is usable from this process."""
    try:
        return bool(kiln.cuda(0).exist)
    except Exception:  # kiln's CUDA runtime missing or broken: fall back to the driver files
        return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl")


def has_c_compiler() -> bool:
    """Return True when the C compiler kiln's CPU backend uses ($CC, gcc, clang or cc) exists."""
    names = [os.environ["CC"].split()[0]] if os.environ.get("CC") else []
    return any(shutil.which(n) for n in [*names, "gcc", "clang", "cc"])


def _target_kind(target: Any) -> str:
    """The kind of a target string: its first word (``"llvm -mcpu=x"`` -> ``"llvm"``)."""
    words = str(target).split()
    return words[0] if words else ""


def _runnable(kind: str) -> bool:
    if kind in _CPU_KINDS:
        return has_c_compiler()
    if kind in _GPU_KINDS:
        return has_gpu()
    return False


def targets_under_test() -> list[str]:
    """The target strings under test: ``TVM_TEST_TARGETS`` split at ``;``, or the defaults."""
    listed = os.environ.get("TVM_TEST_TARGETS", "").split(";")
    return [t.strip() for t in listed if t.strip()] or list(DEFAULT_TEST_TARGETS)



def enabled_targets() -> list[tuple[str, Any]]:
    """``[(target, device), ...]`` for each runnable target under test, in their order; only
    ``llvm`` (when runnable) if none of them is, as TVM falls back."""
    runnable = [t for t in targets_under_test() if _runnable(_target_kind(t))]
    if not runnable and _runnable("llvm"):
        runnable = ["llvm"]
    return [(t, kiln.device(t)) for t in runnable]


def device_enabled(target: str) -> bool:
    """Whether tests may run on ``target`` here: its kind is that of an enabled target."""
    return _target_kind(target) in {_target_kind(t) for t, _ in enabled_targets()}


def _requirement(kinds: tuple[str, ...], markers: tuple[str, ...], reason: str) -> list[Any]:
    """The marks for a test that needs one of ``kinds`` runnable: its markers and a skipif."""
    import pytest

    skip = pytest.mark.skipif(not any(_runnable(k) for k in kinds), reason=reason)
    return [*(getattr(pytest.mark, m) for m in markers), skip]


def target_marks(target: str) -> list[Any]:
    """Marks for a test parametrized with ``target``: the kind's markers (``gpu`` too for GPU
    kinds) and a skip where the target is not enabled."""
    import pytest

    kind = _target_kind(target)
    markers = ("gpu", kind) if kind in _GPU_KINDS else (kind,)
    skip = pytest.mark.skipif(not device_enabled(target),
                              reason=f"target {kind!r} is not enabled here")
    return [*(getattr(pytest.mark, m) for m in markers if m), skip]


def _apply(marks: list[Any], func: F) -> F:
    for mark in marks:
        func = mark(func)
    return func


#: Attributes :func:`exclude_targets` / :func:`known_failing_targets` set on a test function.
EXCLUDED_TARGETS = "tvm_excluded_targets"
KNOWN_FAILING_TARGETS = "tvm_known_failing_targets"


def target_params(func: Callable[..., Any] | None = None) -> list[Any]:
    """The ``target`` parameters of a test run on every target under test: those ``func``
    excludes are left out, those it knows to fail are marked ``xfail``."""
    import pytest

    excluded = getattr(func, EXCLUDED_TARGETS, ())
    failing = getattr(func, KNOWN_FAILING_TARGETS, ())
    params = []
    for target in targets_under_test():
        kind = _target_kind(target)
        if kind in excluded:
            continue
        xfail = [pytest.mark.xfail(reason=f"known failing on {kind!r}")] if kind in failing else []
        params.append(pytest.param(target, marks=[*target_marks(target), *xfail]))
    return params


def parametrize_targets(*targets: Any) -> Any:
    """Run a test once per target, with its ``target`` argument set to each.

    ``@parametrize_targets("llvm", "cuda")`` names the targets; bare ``@parametrize_targets``
    takes :func:`target_params`. A target that is not enabled here is skipped, not dropped.
    """
    import pytest

    def mark(params: list[Any]) -> Callable[[F], F]:
        return pytest.mark.parametrize("target", params, scope="session")

    if len(targets) == 1 and callable(targets[0]):
        return mark(target_params(targets[0]))(targets[0])
    return mark([pytest.param(str(t), marks=target_marks(str(t))) for t in targets])


def _set_target_kinds(attribute: str, kinds: tuple[str, ...]) -> Callable[[F], F]:
    def wrap(func: F) -> F:
        setattr(func, attribute, (*getattr(func, attribute, ()), *kinds))
        return func

    return wrap


def exclude_targets(*kinds: str) -> Callable[[F], F]:
    """``@exclude_targets("cuda")``: the test is never run on these target kinds (for tests
    parametrized over every target by the plugin or a bare ``@parametrize_targets``)."""
    return _set_target_kinds(EXCLUDED_TARGETS, kinds)


def known_failing_targets(*kinds: str) -> Callable[[F], F]:
    """``@known_failing_targets("cuda")``: the test is run on these target kinds and expected
    to fail there (``xfail``)."""
    return _set_target_kinds(KNOWN_FAILING_TARGETS, kinds)


def uses_gpu(func: F) -> F:
    """Mark a test as exercising the GPU path (``gpu`` marker); it still runs without a GPU."""
    import pytest

    return pytest.mark.gpu(func)


def requires_gpu(func: F) -> F:
    """Mark a test ``gpu`` and skip it where no NVIDIA GPU is available."""
    return _apply(_requirement(_GPU_KINDS, ("gpu",), "needs an NVIDIA GPU"), func)


def requires_cuda(func: F) -> F:
    """Mark a test ``gpu`` and ``cuda`` and skip it where no NVIDIA GPU is available."""
    return _apply(_requirement(_GPU_KINDS, ("gpu", "cuda"), "needs CUDA (an NVIDIA GPU)"), func)


def requires_llvm(func: F) -> F:
    """Mark a test ``llvm`` and skip it where kiln's CPU target cannot compile (no C compiler).

    Named after TVM's decorator: kiln's ``llvm`` target is its C backend.
    """
    return _apply(_requirement(_CPU_KINDS, ("llvm",), "needs a C compiler"), func)
