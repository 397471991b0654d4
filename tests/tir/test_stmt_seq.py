"""tvm.tir.stmt_seq / stmt_list, as in TVM: build a SeqStmt, flatten one back."""

import kiln as tvm


def test_stmt_seq_and_stmt_list():
    x = tvm.tir.Var("x", "int32")
    a = tvm.tir.Evaluate(x + 1)
    single = tvm.tir.stmt_seq(a)
    assert single is a
    pair = tvm.tir.stmt_seq(a, x * 2)  # an expression becomes Evaluate
    assert isinstance(pair, tvm.tir.SeqStmt) and isinstance(pair.seq[1], tvm.tir.Evaluate)
    nested = tvm.tir.stmt_seq(pair, tvm.tir.Evaluate(0))
    assert len(nested.seq) == 2  # nothing flattened or dropped when building
    flat = tvm.tir.stmt_list(nested)
    assert len(flat) == 3 and flat[0] is a
    assert tvm.tir.stmt_list(a) == [a]
