"""insert_storage_sync: a barrier after every produce that writes shared memory, and before it
inside a loop; kernels without shared memory are unchanged."""

from __future__ import annotations

import kiln
from kiln import te
from kiln.ir.printer import to_text
from kiln.tir.split_host_device import split_host_device
from kiln.tir.storage_sync import insert_storage_sync


def _shared_tile_kernel(loop: bool):
    """Row sums of A through a shared tile: ``AS`` is produced per block (``loop=False``) or
    per chunk of the reduction (``loop=True``)."""
    n, m = 64, 128
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    if loop:
        ko, _ = s[B].split(s[B].op.reduce_axis[0], factor=16)
        s[AS].compute_at(s[B], ko)
    else:
        s[AS].compute_at(s[B], bx)
    sp = split_host_device(kiln.lower(s, [A, B])["main"])
    return sp.kernels[0].body


def test_barrier_after_the_shared_produce(golden):
    body = insert_storage_sync(_shared_tile_kernel(loop=False))
    golden("tir/storage_sync", to_text(body))
    assert to_text(body).count("tvm_storage_sync") == 1


def test_barrier_before_and_after_inside_a_loop():
    text = to_text(insert_storage_sync(_shared_tile_kernel(loop=True)))
    assert text.count("tvm_storage_sync") == 2


def test_no_shared_memory_is_unchanged():
    n = 256
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    body = split_host_device(kiln.lower(s, [A, B])["main"]).kernels[0].body
    assert insert_storage_sync(body) is body
