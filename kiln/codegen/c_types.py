"""C spellings of kiln dtypes, scalar and vector (GCC/Clang vector extensions)."""

from __future__ import annotations

from kiln.ir import dtype as dt

_SCALAR = {
    "float16": "_Float16", "float32": "float", "float64": "double",
    "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
    "bool": "uint8_t", "handle": "void*",
}


def c_scalar(dtype: str) -> str:
    """The C type of one element of ``dtype`` (bool is stored as one byte)."""
    t = _SCALAR.get(dt.element_of(dtype))
    if t is None:
        raise NotImplementedError(f"C code generation does not support dtype {dtype}")
    return t


def vector_name(dtype: str) -> str:
    """Name of the vector typedef for ``dtype`` (e.g. float32x8), emitted on demand."""
    return dtype.replace("bool", "uint8")


def mask_dtype(dtype: str) -> str:
    """The dtype of a GCC vector comparison of ``dtype`` vectors: signed integers of the same
    width, each lane all ones (true) or all zeros."""
    d = dt.parse(dtype)
    return f"int{d.bits if d.code != 'bool' else 8}x{d.lanes}"


def vector_typedef(dtype: str, aligned: bool = True) -> str:
    d = dt.parse(dtype)
    elem = c_scalar(d.element)
    nbytes = d.bytes * d.lanes
    name = vector_name(dtype) + ("" if aligned else "_u")
    align = "" if aligned else f", aligned({d.bytes})"
    return f"typedef {elem} {name} __attribute__((vector_size({nbytes}){align}));"


def c_type(dtype: str) -> str:
    return c_scalar(dtype) if dt.lanes(dtype) == 1 else vector_name(dtype)
