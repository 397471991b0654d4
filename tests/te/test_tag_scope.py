"""te.tag_scope: the tag of the operations declared inside it, as in TVM."""

import warnings

import pytest

from kiln import te

A = te.placeholder((4,), name="A")


def test_context_manager_and_decorator():
    with te.tag_scope("elemwise"):
        B = te.compute((4,), lambda i: A[i] + 1.0)
    assert B.op.tag == "elemwise"

    @te.tag_scope(tag="extern_copy")
    def copy(x):
        return te.extern(x.shape, [x], lambda ins, outs: te.const(0), name="copy")

    assert copy(A).op.tag == "extern_copy"
    assert te.compute((4,), lambda i: A[i]).op.tag == ""  # the scope is closed again


def test_errors_and_unused_warning():
    with pytest.raises(ValueError, match="nested tags are not allowed"):
        with te.tag_scope("a"):
            te.compute((4,), lambda i: A[i], tag="b")
    with pytest.raises(ValueError, match="tag scopes do not nest"):
        with te.tag_scope("a"), te.tag_scope("b"):
            pass
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with te.tag_scope("unused"):
            pass
    assert any("Tag 'unused' declared via TagScope was not used" in str(w.message)
               for w in caught)
