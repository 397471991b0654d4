"""``tvm.contrib.clang``: find clang and compile C to LLVM IR text.

``find_clang`` returns the clang executables on PATH (``$CLANG`` first when set). kiln
compiles through C, not LLVM, so ``create_llvm`` only runs clang (``-S -emit-llvm``) and
returns the text; nothing in kiln links that IR into a module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from kiln.errors import CompileError

__all__ = ["find_clang", "create_llvm"]

_CANDIDATES = ("clang", "clang-20", "clang-19", "clang-18", "clang-17", "clang-16",
               "clang-15", "clang-14")


def find_clang(required: bool = True) -> list[str]:
    """Paths of the clang compilers on PATH (``$CLANG`` first). Raises RuntimeError when
    there is none and ``required``."""
    names = [os.environ["CLANG"]] if os.environ.get("CLANG") else []
    names += _CANDIDATES
    found = list(dict.fromkeys(p for p in map(shutil.which, names) if p))
    if not found and required:
        raise RuntimeError(f"cannot find clang, candidates are: {names}; install clang or "
                           "set CLANG to its path")
    return found


def create_llvm(inputs: str | Sequence[str], output: str | None = None,
                options: Sequence[str] | None = None, cc: str | None = None) -> str:
    """Compile C ``inputs`` (source texts or paths of ``.c`` files) to LLVM IR and return its
    text; ``output`` also keeps it in that file. Raises CompileError with clang's log."""
    items = [inputs] if isinstance(inputs, str) else list(inputs)
    cc = cc or find_clang()[0]
    with tempfile.TemporaryDirectory(prefix="kiln-clang-") as d:
        files = []
        for i, item in enumerate(items):
            if os.path.isfile(item):
                files.append(item)
            else:
                files.append(os.path.join(d, f"input{i}.c"))
                with open(files[-1], "w") as f:
                    f.write(item)
        out = output or os.path.join(d, "output.ll")
        cmd = [cc, "-S", "-emit-llvm", "-o", out, *files, *(options or ())]
        res = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        if res.returncode != 0:
            raise CompileError("Compilation error:\n" + " ".join(cmd) + "\n" + res.stderr)
        with open(out) as f:
            return f.read()
