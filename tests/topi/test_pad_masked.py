"""Branch-free (masked) zero padding and how the packed convolutions use it."""

import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.topi.utils import all_ops

from . import ref
from .common import randn, run


@pytest.mark.parametrize("before,after", [((0, 0, 1, 2, 0), (0, 0, 2, 1, 0)),
                                          ((0, 1, 0, 0, 0), (0, 0, 0, 3, 0))])
def test_pad_masked_equals_zero_padding(before, after):
    x = randn((1, 2, 5, 4, 16), 3)
    X = te.placeholder(x.shape, name="X")
    Y = topi.nn.pad_masked(X, before, after)
    expected = np.pad(x, list(zip(before, after, strict=True)))
    for sched in (topi.generic.schedule_injective, topi.x86.schedule_injective):
        (y,) = run(sched, Y, [X], [x])
        np.testing.assert_array_equal(y, expected)


def test_pad_masked_errors():
    X = te.placeholder((2, 3), name="X")
    with pytest.raises(ValueError, match="bad padding"):
        topi.nn.pad_masked(X, (1,), (1,))
    with pytest.raises(ValueError, match="bad padding"):
        topi.nn.pad_masked(X, (0, -1))


def _conv_source(depthwise):
    x = te.placeholder((1, 2, 9, 9, 16), name="x")
    if depthwise:
        w = te.placeholder((2, 1, 3, 3, 1, 16), name="w")
        y = topi.nn.depthwise_conv2d_NCHWc(x, w, 1, 1, 1)
    else:
        w = te.placeholder((2, 2, 3, 3, 16, 16), name="w")
        y = topi.nn.conv2d_NCHWc(x, w, 1, 1, 1)
    pads = [op for op in all_ops([y]) if "pad" in (op.tag or "")]
    assert len(pads) == 1 and pads[0].attrs["masked"]
    return kiln.build(topi.x86.schedule_auto([y]), [x, w, y], "llvm").get_source(), x, w, y


def test_packed_convs_pad_without_branches():
    """conv2d_NCHWc: a vectorized padding stage; depthwise: the padding inlined."""
    src, *_ = _conv_source(False)
    assert "data_pad" in src and " ? " not in src.split("default_function_compute")[1]
    src, *_ = _conv_source(True)
    assert "PaddedInput" not in src


@pytest.mark.parametrize("depthwise", [False, True])
def test_packed_convs_with_masked_padding_match_reference(depthwise):
    _, x, w, y = _conv_source(depthwise)
    xa = randn((1, 32, 9, 9), 4)
    if depthwise:
        wa = randn((32, 1, 3, 3), 5)
        expected = ref.depthwise_conv2d_nchw(xa, wa, 1, 1, 1)
        wp = wa.reshape(2, 16, 1, 3, 3).transpose(0, 2, 3, 4, 1)[:, :, :, :, None, :]
    else:
        wa = randn((32, 32, 3, 3), 5)
        expected = ref.conv2d_nchw(xa, wa, 1, 1, 1)
        wp = ref.pack_kernel(wa, 16, 16)
    (out,) = run(topi.x86.schedule_auto, y, [x, w], [ref.pack_nchwc(xa, 16),
                                                   np.ascontiguousarray(wp)])
    np.testing.assert_allclose(ref.unpack_nchwc(out), expected, rtol=1e-4, atol=1e-4)
