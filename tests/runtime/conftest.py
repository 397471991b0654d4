"""Fixtures for the runtime tests: a private compile cache and a hand-written ABI module."""

from __future__ import annotations

import json

import pytest

from kiln.runtime import Module
from kiln.runtime.compiler import runtime_header

MODULE_INFO = {"functions": ["vadd", "axpy", "record", "describe", "count"], "entry": "vadd",
               "target": "c"}

# Hand-written C following kiln_c_runtime.h: what codegen will produce, in miniature.
TEST_BODY = r"""
#define CHECK(cond, ...) do { if (!(cond)) { kiln_set_error(__VA_ARGS__); return -1; } } while (0)

static int check_f(const DLTensor* t, int bits, const char* what) {
  if (t->dtype.code != KILN_DL_FLOAT || t->dtype.bits != bits || t->dtype.lanes != 1) {
    kiln_set_error("%s: expected float%d", what, bits);
    return -1;
  }
  return 0;
}

/* vadd(a, b, c): c = a + b for 1-D float32 tensors of equal length on the CPU. */
KILN_DLL int32_t vadd(KilnValue* args, int32_t* codes, int32_t n) {
  CHECK(n == 3, "vadd: expected 3 arguments, got %d", n);
  for (int i = 0; i < 3; ++i)
    CHECK(codes[i] == KILN_DLTENSOR, "vadd: argument %d must be a tensor", i);
  DLTensor* a = (DLTensor*)args[0].v_handle;
  DLTensor* b = (DLTensor*)args[1].v_handle;
  DLTensor* c = (DLTensor*)args[2].v_handle;
  CHECK(a->ndim == 1 && b->ndim == 1 && c->ndim == 1,
        "vadd: expected 1-D tensors, got ndim=%d", (int)a->ndim);
  if (check_f(a, 32, "vadd") || check_f(b, 32, "vadd") || check_f(c, 32, "vadd")) return -1;
  CHECK(a->device.device_type == KILN_CPU, "vadd: expected a CPU tensor");
  int64_t len = a->shape[0];
  CHECK(b->shape[0] == len && c->shape[0] == len, "vadd: shape mismatch");
  const float* pa = (const float*)a->data;
  const float* pb = (const float*)b->data;
  float* pc = (float*)c->data;
  #pragma omp parallel for if (len > 1000000)
  for (int64_t i = 0; i < len; ++i) pc[i] = pa[i] + pb[i];
  return 0;
}

/* axpy(x, out, alpha: float, beta: int): out = alpha * x + beta, float64. */
KILN_DLL int32_t axpy(KilnValue* args, int32_t* codes, int32_t n) {
  CHECK(n == 4, "axpy: expected 4 arguments, got %d", n);
  CHECK(codes[0] == KILN_DLTENSOR && codes[1] == KILN_DLTENSOR, "axpy: tensors expected");
  CHECK(codes[2] == KILN_FLOAT, "axpy: alpha must be a float (code %d)", codes[2]);
  CHECK(codes[3] == KILN_INT, "axpy: beta must be an int (code %d)", codes[3]);
  DLTensor* x = (DLTensor*)args[0].v_handle;
  DLTensor* out = (DLTensor*)args[1].v_handle;
  if (check_f(x, 64, "axpy") || check_f(out, 64, "axpy")) return -1;
  int64_t len = 1;
  for (int i = 0; i < x->ndim; ++i) len *= x->shape[i];
  double alpha = args[2].v_float64;
  int64_t beta = args[3].v_int64;
  for (int64_t i = 0; i < len; ++i)
    ((double*)out->data)[i] = alpha * ((double*)x->data)[i] + (double)beta;
  return 0;
}

/* record(out, ...): out[2i] = type code of extra arg i, out[2i+1] = its value (floats
   times 1000, tensors: their ndim). out is int64. */
KILN_DLL int32_t record(KilnValue* args, int32_t* codes, int32_t n) {
  CHECK(n >= 1 && codes[0] == KILN_DLTENSOR, "record: first argument must be a tensor");
  int64_t* out = (int64_t*)((DLTensor*)args[0].v_handle)->data;
  for (int i = 1; i < n; ++i) {
    out[2 * (i - 1)] = codes[i];
    if (codes[i] == KILN_INT) out[2 * (i - 1) + 1] = args[i].v_int64;
    else if (codes[i] == KILN_FLOAT) out[2 * (i - 1) + 1] = (int64_t)(args[i].v_float64 * 1000);
    else out[2 * (i - 1) + 1] = ((DLTensor*)args[i].v_handle)->ndim;
  }
  return 0;
}

/* describe(t, out): out (int64[16]) = device type, device id, ndim, code, bits, lanes,
   data % 64, strides == NULL, byte_offset, shape... */
KILN_DLL int32_t describe(KilnValue* args, int32_t* codes, int32_t n) {
  CHECK(n == 2 && codes[0] == KILN_DLTENSOR && codes[1] == KILN_DLTENSOR, "describe: (t, out)");
  DLTensor* t = (DLTensor*)args[0].v_handle;
  int64_t* o = (int64_t*)((DLTensor*)args[1].v_handle)->data;
  o[0] = t->device.device_type; o[1] = t->device.device_id; o[2] = t->ndim;
  o[3] = t->dtype.code; o[4] = t->dtype.bits; o[5] = t->dtype.lanes;
  o[6] = (int64_t)((uintptr_t)t->data % 64); o[7] = t->strides == NULL;
  o[8] = (int64_t)t->byte_offset;
  for (int i = 0; i < t->ndim && i < 7; ++i) o[9 + i] = t->shape[i];
  return 0;
}

/* count(c): c[0] += 1 for an int64 tensor c; counts calls. */
KILN_DLL int32_t count(KilnValue* args, int32_t* codes, int32_t n) {
  CHECK(n == 1 && codes[0] == KILN_DLTENSOR, "count: (c)");
  ((int64_t*)((DLTensor*)args[0].v_handle)->data)[0] += 1;
  return 0;
}
"""


def module_source(body: str = TEST_BODY, info: dict | None = None) -> str:
    """Header + body + kiln_module_info, as codegen lays a file out."""
    text = json.dumps(info or MODULE_INFO).replace("\\", "\\\\").replace('"', '\\"')
    return (
        runtime_header()
        + body
        + f'\nKILN_DLL const char* kiln_module_info(void) {{ return "{text}"; }}\n'
    )


@pytest.fixture(scope="session", autouse=True)
def kiln_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """Every runtime test compiles into a private cache (shared by the session)."""
    path = tmp_path_factory.mktemp("kiln-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KILN_CACHE_DIR", str(path))
        mp.delenv("KILN_NO_FASTCALL", raising=False)
        yield path


@pytest.fixture(scope="session")
def test_module(kiln_cache_dir) -> Module:
    """The hand-written test module, compiled once per session."""
    return Module.from_source(module_source(), MODULE_INFO["functions"], "vadd", "c")
