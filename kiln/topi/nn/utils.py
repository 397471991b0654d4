"""Shape helpers of the nn operators: padding tuples and output sizes."""

from __future__ import annotations

from typing import NamedTuple

from ..utils import get_const_int


def _pair(x, name: str) -> tuple[int, int]:
    if isinstance(x, int):
        return x, x
    x = tuple(x)
    if len(x) == 1:
        return int(x[0]), int(x[0])
    if len(x) != 2:
        raise ValueError(f"{name} must be an int or a pair, got {x}")
    return get_const_int(x[0]), get_const_int(x[1])


def get_pad_tuple(padding, kernel) -> tuple[int, int, int, int]:
    """``(pad_top, pad_left, pad_down, pad_right)`` from ``padding``.

    ``padding``: an int (all sides), a pair ``(pad_h, pad_w)``, four ints
    ``(top, left, bottom, right)``, or ``"VALID"``/``"SAME"`` (TensorFlow's rule: for
    stride 1, the extra pad of an odd total goes to the bottom/right). ``kernel`` is the
    (dilated) kernel size pair, used by ``"SAME"``.
    """
    kh, kw = _pair(kernel, "kernel")
    if isinstance(padding, str):
        p = padding.upper()
        if p == "VALID":
            return 0, 0, 0, 0
        if p == "SAME":
            ph, pw = kh - 1, kw - 1
            return ph // 2, pw // 2, ph - ph // 2, pw - pw // 2
        raise ValueError(f"unknown padding {padding!r}; use 'SAME', 'VALID' or numbers")
    if isinstance(padding, int):
        return padding, padding, padding, padding
    padding = tuple(get_const_int(p) for p in padding)
    if len(padding) == 1:
        return (padding[0],) * 4
    if len(padding) == 2:
        return padding[0], padding[1], padding[0], padding[1]
    if len(padding) == 4:
        return padding
    raise ValueError(f"padding must have 1, 2 or 4 entries, got {padding}")


def conv_out_size(size: int, kernel: int, pad_before: int, pad_after: int, stride: int,
                  dilation: int = 1) -> int:
    """Output length of a convolution/pool along one axis."""
    dk = (kernel - 1) * dilation + 1
    out = (size + pad_before + pad_after - dk) // stride + 1
    if out <= 0:
        raise ValueError(
            f"the (dilated) kernel of size {dk} does not fit the padded input of size "
            f"{size + pad_before + pad_after}")
    return out


class ConvWindow(NamedTuple):
    """Where a 2-D convolution's window goes: its strides and dilation, the input's padding
    ``(top, left, bottom, right)`` and the output's height and width."""

    strides: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]
    out_hw: tuple[int, int]


def conv_window(in_hw: tuple[int, int], kernel_hw: tuple[int, int], stride, padding,
                dilation) -> ConvWindow:
    """The :class:`ConvWindow` of a ``kernel_hw`` kernel over an ``in_hw`` input."""
    (sh, sw), (dh, dw) = _pair(stride, "stride"), _pair(dilation, "dilation")
    (kh, kw), (in_h, in_w) = kernel_hw, in_hw
    pt, pl, pb, pr = get_pad_tuple(padding, ((kh - 1) * dh + 1, (kw - 1) * dw + 1))
    return ConvWindow((sh, sw), (dh, dw), (pt, pl, pb, pr),
                      (conv_out_size(in_h, kh, pt, pb, sh, dh),
                       conv_out_size(in_w, kw, pl, pr, sw, dw)))


__all__ = ["get_pad_tuple", "conv_out_size", "ConvWindow", "conv_window"]
