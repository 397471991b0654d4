"""The book's §1.4 program, as written (`import tvm`, `from tvm import te, rpc`), run by
``python -m kiln.as_tvm`` against a server process. MXNet and PIL lines are left out."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT, TIMEOUT

BOOK = '''
import d2ltvm
import numpy as np
import tvm
from tvm import te, rpc, relay

n = 100
target = 'llvm -target=x86_64-pc-linux-gnu'

args = d2ltvm.vector_add(n)
s = te.create_schedule(args[-1].op)
mod = tvm.build(s, args, target)

mod_fname = 'vector-add.tar'
mod.export_library(mod_fname)

remote = rpc.connect('127.0.0.1', PORT)

remote.upload(mod_fname)
remote_mod = remote.load_module(mod_fname)

ctx = remote.cpu()
a, b, c = d2ltvm.get_abc(n, lambda x: tvm.nd.array(x, ctx=ctx))

remote_mod(a, b, c)

np.testing.assert_equal(a.asnumpy()+b.asnumpy(), c.asnumpy())
print("book 1.4 ok")
'''


def test_book_section_1_4(server_process, tmp_path):
    import pytest

    import kiln

    if not kiln.target.host_triple().startswith("x86_64-"):
        pytest.skip("the book's triple is x86_64-pc-linux-gnu")
    _, port = server_process
    script = tmp_path / "book_1_4.py"
    script.write_text(BOOK.replace("PORT", str(port)))
    out = subprocess.run([sys.executable, "-m", "kiln.as_tvm", str(script)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=3 * TIMEOUT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "book 1.4 ok" in out.stdout
