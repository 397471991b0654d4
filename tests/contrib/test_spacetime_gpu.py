"""kiln.contrib.spacetime.gpu_memory on the book's chapter 5 schedules: coalescing of the
continuous and alternate broadcast adds (section 5.3), bank conflicts of the convolution's
shared-memory reads without and with virtual threads (section 5.5)."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.contrib import spacetime

from ..book._shared import load_example

ch5 = load_example("book", "ch5_gpu")


def test_continuous_schedule_needs_four_transactions_per_warp():
    """n = 256: each thread adds 4 consecutive elements, so the 32 threads of a warp read
    floats 4 apart: 512 bytes, four 128-byte segments per instruction; A[blockIdx.x] is one
    word for the whole warp, one 32-byte transaction."""
    tr = spacetime.trace(*ch5.bcast_continuous(256))
    counts = spacetime.coalescing(tr)
    summary = counts.summary()
    assert summary["B"]["per_access"] == 4 and summary["C"]["per_access"] == 4
    assert summary["A"]["per_access"] == 1
    a = counts.buffer == tr.buffer_index("A")
    assert set(counts.bytes[a].tolist()) == {32}
    assert set(counts.bytes[~a].tolist()) == {512}


def test_alternate_schedule_coalesces():
    """Consecutive threads read consecutive floats: one 128-byte transaction per warp."""
    tr = spacetime.trace(*ch5.bcast_alternate(256))
    counts = spacetime.coalescing(tr)
    assert all(s["per_access"] == 1 for s in counts.summary().values())
    b = counts.buffer == tr.buffer_index("B")
    assert set(counts.bytes[b].tolist()) == {128}


def _shared_reads(schedule):
    tr = spacetime.trace(*schedule(32, 4, 64, 3, 1, 1), window=(0, 3000))
    return spacetime.bank_conflicts(tr.select(~tr.write)), tr


def test_conv_tiling_reads_four_way_conflicts():
    """A warp is threadIdx.x 0..15 by threadIdx.y 0..1; thread (x, y) reads word
    66*i1 + 132*y + 4*x + i2 of PaddedX.shared: banks 4*(x + y) mod 32, 8 banks with 4
    distinct words each, 4 passes. K.shared is read at one word per warp (broadcast)."""
    counts, tr = _shared_reads(ch5.conv_tiling)
    x = counts.buffer == tr.buffer_index("PaddedX.shared")
    assert x.any() and set(counts.requests[x].tolist()) == {4}
    k = counts.buffer == tr.buffer_index("K.shared")
    assert k.any() and set(counts.requests[k].tolist()) == {1}


def test_virtual_threads_halve_the_conflicts():
    """With 2 virtual threads thread (x, y) reads word 64*i1 + 128*y + 2*x + i2: banks
    2*x + i2 mod 32, 16 banks with the two rows y = 0, 1 each, 2 passes (book, Fig. 5.5.4)."""
    counts, tr = _shared_reads(ch5.conv_vthread)
    x = counts.buffer == tr.buffer_index("PaddedX.shared")
    assert x.any() and set(counts.requests[x].tolist()) == {2}


def test_a_cpu_trace_is_refused():
    from kiln import te

    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i], name="B")
    tr = spacetime.trace(te.create_schedule(B.op), [A, B])
    with pytest.raises(ValueError, match="GPU trace"):
        spacetime.coalescing(tr)


def _strided_shared_read(stride: int):
    """Thread t reads word t * stride of a shared copy of A."""
    from kiln import te

    A = te.placeholder((32 * 32,), name="A")
    B = te.compute((32,), lambda i: A[i * stride], name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[B], B.op.axis[0])
    tr = spacetime.trace(s, [A, B])
    return tr.select(~tr.write & (tr.buffer == tr.buffer_index("A.shared")))


@pytest.mark.parametrize("stride, passes", [(0, 1), (1, 1), (32, 32)])
def test_bank_passes_of_strided_reads(stride, passes):
    """One word for all 32 threads: one pass (broadcast); consecutive words: one pass;
    words 32 apart: all in one bank, 32 passes."""
    reads = _strided_shared_read(stride)
    assert np.unique(spacetime.bank_conflicts(reads).requests).tolist() == [passes]
