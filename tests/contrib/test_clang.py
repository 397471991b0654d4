"""tvm.contrib.clang: finding clang, and C to LLVM IR where clang is installed."""

import shutil

import pytest

from kiln.contrib import clang


def test_find_clang_without_clang(monkeypatch):
    monkeypatch.delenv("CLANG", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    assert clang.find_clang(required=False) == []
    with pytest.raises(RuntimeError, match="cannot find clang"):
        clang.find_clang()


@pytest.mark.skipif(not clang.find_clang(required=False), reason="clang is not installed")
def test_create_llvm():
    ir = clang.create_llvm("int add(int a, int b) { return a + b; }", options=["-O2"])
    assert "define" in ir and "@add" in ir
