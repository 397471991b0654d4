"""scalarize_vector_stores: no vector store is left in a kernel body; each becomes an unrolled
loop over its lanes."""

from __future__ import annotations

import kiln
from kiln import te
from kiln.ir import dtype as dt
from kiln.ir import stmt as S
from kiln.ir.functor import post_order_visit
from kiln.ir.printer import to_text
from kiln.tir.scalarize_vector_stores import scalarize_vector_stores
from kiln.tir.split_host_device import split_host_device


def test_vector_store_becomes_lane_loop(golden):
    n = 1024
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    bo, bi = s[B].split(B.op.axis[0], factor=256)
    tx, vec = s[B].split(bi, factor=4)
    s[B].bind(bo, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].vectorize(vec)
    body = split_host_device(kiln.lower(s, [A, B])["main"]).kernels[0].body
    assert "ramp" in to_text(body)
    out = scalarize_vector_stores(body)
    golden("tir/scalarize_vector_stores", to_text(out))
    stores = []
    post_order_visit(out, lambda x: stores.append(x) if isinstance(x, S.Store) else None)
    assert stores and all(dt.lanes(st.value.dtype) == 1 and dt.lanes(st.index.dtype) == 1
                          for st in stores)
    assert scalarize_vector_stores(out) is out
