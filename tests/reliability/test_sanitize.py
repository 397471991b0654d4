"""Sanitized builds (issue 25): the option, the flags, the cache key, and the sanitized tier.

The tier (``pytest -m sanitize``; CI runs it as part of the suite) runs the book's CPU
programs that build a kernel (the assignment's conv1d schedule variants apart: its baseline
stays), a sample of topi operators (each with its x86 schedule only:
``KILN_TOPI_SCHEDULES=x86``), the schedule property test's fixed cases (its Hypothesis
fuzzers are ``slow``: plain runs only), the CPU tests of the extern, scan and
hybrid-script operations and the ONNX model tests in a child pytest with the
AddressSanitizer runtime preloaded and ``KILN_SANITIZE=address,undefined`` (so kiln's bound
checks are on too): every kernel is built with ASan and UBSan, and any report ends the child
with a failure. Programs that compile CUDA with NVRTC are left
out: NVRTC cannot find its builtins library when ASan intercepts ``dlopen``, and ASan does
not see device memory anyway.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.errors import TVMError
from kiln.runtime import sanitize
from kiln.runtime.compiler import compiler_env

from ..topi.common import schedules

REPO = Path(__file__).resolve().parents[2]
_NOT_SLOW = "not slow and not gpu"

#: the book's tests that build no kernel (printed loop IR, golden texts, plots): nothing for
#: the sanitizers to see, so the tier leaves them to the plain run
_BOOK_WITHOUT_KERNELS = ["-k", "not _lowered and not _structure and not test_plot_helpers"]

#: the tier: group -> the child pytest's arguments (about 2.1 CPU-minutes in all, 65 s on
#: two workers)
TIER: dict[str, list[str]] = {
    "book": ["tests/book", "-m", _NOT_SLOW, "--ignore", "tests/book/test_assignment_gpu.py",
             "--ignore", "tests/book/test_ch5_gpu.py",
             "--ignore", "tests/book/test_assignment_conv1d_schedules.py",
             *_BOOK_WITHOUT_KERNELS],
    # one broadcast case; of the reductions over the last axis, the one with a vector tail
    "topi_injective_reduce": ["tests/topi/test_injective_reduce.py", "-m", _NOT_SLOW,
                              "-k", "(not test_broadcast_binary or sa0-sb0) and "
                                    "not test_reductions[shape2--1-False]"],
    "topi_dense_pool_norm": ["tests/topi/test_dense_pool_norm.py", "-m", _NOT_SLOW],
    "schedule_property": ["tests/te/test_schedule_property.py", "-m", _NOT_SLOW],
    "extern_scan_hybrid": ["tests/te/test_extern.py", "tests/te/test_scan.py",
                           "tests/te/test_hybrid.py", "-m", _NOT_SLOW, "-k", "not cuda"],
    "models": ["tests/relay/test_onnx_e2e.py", "-m", _NOT_SLOW],
}
#: the child's environment beyond :func:`sanitize.sanitizer_env`: topi's ``check`` builds each
#: operator with its x86 schedule only (the generic one is its root loop nest, whose indices
#: the x86 schedule's split and vectorized loops cover; the plain run checks both)
TIER_ENV = {"KILN_TOPI_SCHEDULES": "x86"}
#: what a sanitizer report starts with
REPORT_MARKS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")


def _sanitized_env() -> dict[str, str]:
    try:
        return sanitize.sanitizer_env()
    except TVMError as e:
        pytest.skip(f"no sanitizer runtime: {e}")


def _run_sanitized(argv: list[str], timeout: float = 540,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, env={**_sanitized_env(), **(env or {})},
                          capture_output=True, text=True, errors="replace", timeout=timeout)


@pytest.mark.sanitize
@pytest.mark.slow
@pytest.mark.parametrize("group", list(TIER))
def test_sanitized_tier(group):
    res = _run_sanitized([sys.executable, "-m", "pytest", "-q", "-n", "0",
                          "-p", "no:cacheprovider", *TIER[group]], env=TIER_ENV)
    out = res.stdout + res.stderr
    reports = [line for line in out.splitlines() if any(m in line for m in REPORT_MARKS)]
    assert res.returncode == 0 and not reports, (
        f"sanitized {group} (exit status {res.returncode}): {reports[:5]}\n{out[-6000:]}")


def test_the_tier_builds_topi_operators_with_their_x86_schedules(monkeypatch):
    assert schedules("schedule_reduce") == [topi.generic.schedule_reduce,
                                            topi.x86.schedule_reduce]
    for name, value in TIER_ENV.items():
        monkeypatch.setenv(name, value)
    assert schedules("schedule_reduce") == [topi.x86.schedule_reduce]
    monkeypatch.setenv("KILN_TOPI_SCHEDULES", "arm")
    with pytest.raises(ValueError, match="names none of"):
        schedules("schedule_reduce")


_OUT_OF_BOUNDS = textwrap.dedent("""
    import numpy as np, kiln
    from kiln import te
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i + 40], name="B")
    s = te.create_schedule(B.op)
    with kiln.transform.PassContext(config={"tir.instrument_bound_checkers": CHECKS}):
        f = kiln.build(s, [A, B])
    try:
        f(kiln.nd.array(np.zeros(16, "float32")), kiln.nd.empty((16,)))
    except kiln.TVMError as e:
        print("TVMError:", e)
""")


@pytest.mark.sanitize
@pytest.mark.parametrize("checks", [False, True])
def test_the_tier_sees_an_out_of_bounds_read(checks):
    """Without bound checks ASan reports the read, at its line of the kernel's source, and
    ends the process; with them, kiln raises first and ASan has nothing to report."""
    res = _run_sanitized([sys.executable, "-c", _OUT_OF_BOUNDS.replace("CHECKS", str(checks))],
                         timeout=120)
    if checks:
        assert res.returncode == 0, res.stderr[-3000:]
        assert ("TVMError: Out of bounds: kernel default_function accessed buffer A at index "
                "40, outside its 16 elements [0, 16)") in res.stdout
    else:
        assert res.returncode != 0
        assert "ERROR: AddressSanitizer: heap-buffer-overflow" in res.stderr
        assert re.search(r"#0 0x[0-9a-f]+ in default_function_compute \S+\.c:\d+", res.stderr)


def test_parse_sanitizers():
    assert sanitize.parse_sanitizers("undefined, address") == ("address", "undefined")
    assert sanitize.parse_sanitizers(["address"]) == ("address",)
    assert sanitize.parse_sanitizers("") == sanitize.parse_sanitizers(None) == ()
    with pytest.raises(TVMError, match="unknown sanitizer 'thread': kiln builds with address"):
        sanitize.parse_sanitizers("address,thread")


def test_the_config_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("KILN_SANITIZE", "address")
    assert sanitize.requested_sanitizers({}) == ("address",)
    assert sanitize.requested_sanitizers({sanitize.SANITIZE_CONFIG: ""}) == ()
    monkeypatch.setenv("KILN_SANITIZE", "memory")
    with pytest.raises(TVMError, match="unknown sanitizer 'memory'"):
        sanitize.requested_sanitizers({})


def test_flags_and_environment():
    assert sanitize.sanitize_flags(()) == []
    flags = sanitize.sanitize_flags(("address", "undefined"))
    assert flags[:2] == ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    env = _sanitized_env()
    assert env["KILN_SANITIZE"] == "address,undefined"
    assert env["LD_PRELOAD"].split(":")[0] == sanitize.asan_runtime()
    if sanitize.cxx_runtime():  # after ASan, so that its __cxa_throw interceptor finds it
        assert env["LD_PRELOAD"].split(":")[1] == sanitize.cxx_runtime()
    assert "detect_leaks=0" in env["ASAN_OPTIONS"]
    # the compiler does not start with the sanitizer runtime; other preloads stay
    assert "LD_PRELOAD" not in compiler_env(env)
    mixed = {"LD_PRELOAD": f"{sanitize.asan_runtime()}:/opt/libother.so"}
    assert compiler_env(mixed)["LD_PRELOAD"] == "/opt/libother.so"
    users = {"LD_PRELOAD": "/opt/libstdc++.so.6:" + env["LD_PRELOAD"]}
    assert compiler_env(users)["LD_PRELOAD"] == "/opt/libstdc++.so.6"


def _vector_add():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    return te.create_schedule(B.op), [A, B]


def test_undefined_sanitizer_runs_in_process():
    s, args = _vector_add()
    plain = kiln.build(s, args)
    checked = kiln.build(s, args, sanitize="undefined")
    # a separate cache entry (the flags are in its key), with bound checks in its source
    assert checked.library_path != plain.library_path
    assert "kiln_check_index" in checked.get_source()
    assert "kiln_check_index" not in plain.get_source()
    a = np.arange(10, dtype="float32")
    b = kiln.nd.empty((10,))
    checked(kiln.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a + 1)


def test_address_sanitizer_kernel_is_not_loaded_without_its_runtime():
    """dlopen of an ASan library aborts a process that did not start with ASan: kiln
    refuses with the command that works (this process has no ASan runtime)."""
    _sanitized_env()  # skips where the compiler has no ASan runtime
    s, args = _vector_add()
    with pytest.raises(TVMError, match=r"sanitize='address' can only be loaded .*LD_PRELOAD="):
        kiln.build(s, args, sanitize="address,undefined")


def test_environment_variable_selects_sanitizers(monkeypatch):
    monkeypatch.setenv("KILN_SANITIZE", "undefined")
    s, args = _vector_add()
    assert "kiln_check_index" in kiln.build(s, args).get_source()
    # sanitize="" builds plainly whatever the environment says
    assert "kiln_check_index" not in kiln.build(s, args, sanitize="").get_source()
