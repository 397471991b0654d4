"""The CUDA emulator's own machinery: its standard headers are precompiled once and used."""

from __future__ import annotations

import os
import subprocess

import pytest

from . import cuda_emulator

needs_gxx = pytest.mark.skipif(not cuda_emulator.available(), reason="no g++ (emulator)")


@needs_gxx
def test_sources_use_the_precompiled_headers(tmp_path):
    header = cuda_emulator._precompiled_headers(str(tmp_path))
    gch = header + ".gch"
    built = os.stat(gch).st_mtime_ns
    assert cuda_emulator._precompiled_headers(str(tmp_path)) == header  # built once
    assert os.stat(gch).st_mtime_ns == built
    src = tmp_path / "use.cc"
    src.write_text("std::vector<int> v;\n")
    # g++ -H marks a precompiled header it loads with "!" (and one it rejects with "x")
    res = subprocess.run(["g++", *cuda_emulator._CXX_FLAGS, "-include", header, "-H", "-c",
                          str(src), "-o", str(tmp_path / "use.o")],
                         capture_output=True, text=True, check=True)
    assert f"! {gch}" in res.stderr, res.stderr[:2000]
