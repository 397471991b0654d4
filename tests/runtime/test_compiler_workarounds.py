"""A GCC 12 miscompilation of guarded loads (if-conversion) must not reach kiln's results."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import te


def test_split_padding_stage_with_guarded_loads():
    n, pad, factor = 37, 10, 5
    A = te.placeholder((n,), name="A")
    P = te.compute((n + 2 * pad,), lambda i: te.if_then_else(
        te.any(i < pad, i >= n + pad), 0.0, A[i - pad]), name="P")
    s = te.create_schedule(P.op)
    s[P].split(P.op.axis[0], factor=factor)
    mod = kiln.build(s, [A, P])
    a = np.arange(1, n + 1, dtype="float32")
    p = kiln.nd.empty((n + 2 * pad,))
    mod(kiln.nd.array(a), p)
    np.testing.assert_array_equal(p.numpy(), np.pad(a, pad))


def test_gcc_flags_follow_the_version_text(monkeypatch):
    from kiln.runtime import compiler

    def flags_for(version):
        monkeypatch.setattr(compiler, "compiler_version", lambda command: version)
        return compiler._workaround_flags(("cc",))

    gcc12 = "cc (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.\n"
    assert flags_for(gcc12) == ["-fno-predictive-commoning", "-fno-tree-loop-if-convert"]
    gcc13 = "gcc-real (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0\n"
    assert flags_for(gcc13) == ["-fno-predictive-commoning", "-fno-tree-loop-if-convert"]
    assert flags_for("gcc (GCC) 14.2.1 20240801\n") == ["-fno-predictive-commoning"]
    assert flags_for("Debian clang version 14.0.6\nTarget: x86_64-pc-linux-gnu\n") == []


def test_openmp_threads_spin_briefly_then_sleep_by_default():
    """kiln's import sets a short libgomp spin unless the user chose one (the settings must
    be in the environment before the OpenMP runtime starts)."""
    import os
    import subprocess
    import sys

    code = "import kiln, os; print(os.environ['OMP_WAIT_POLICY'], os.environ['GOMP_SPINCOUNT'])"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}

    def settings_after_import(**user):
        return subprocess.run([sys.executable, "-c", code], env={**env, **user},
                              capture_output=True, text=True, check=True).stdout.split()

    assert settings_after_import() == ["passive", "10000"]
    assert settings_after_import(GOMP_SPINCOUNT="0") == ["passive", "0"]
