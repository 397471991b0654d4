/* kiln C runtime ABI: pasted at the top of every generated CPU source file.
 *
 * A compiled function has the "packed" signature
 *     int32_t name(KilnValue* args, int32_t* type_codes, int32_t num_args);
 * Each argument is a DLTensor* (type code KILN_DLTENSOR) or a scalar (KILN_INT: v_int64,
 * KILN_FLOAT: v_float64). It returns 0 on success; on failure it records a message with
 * kiln_set_error() and returns -1. kiln_last_error() returns the message.
 * kiln_module_info() returns a JSON text describing the library (functions, entry, target).
 * The DLTensor layout is DLPack's.
 */
#ifndef KILN_C_RUNTIME_H_
#define KILN_C_RUNTIME_H_
#include <stdint.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#if defined(_WIN32)
#define KILN_DLL __declspec(dllexport)
#define KILN_ONCE
#define KILN_LOCAL
#else
#define KILN_DLL __attribute__((visibility("default")))
/* One definition per library of what every translation unit defines: relay.build links a
 * library from kernels compiled apart (kiln/runtime/compiler.py, link_shared). */
#define KILN_ONCE __attribute__((weak))
#define KILN_LOCAL __attribute__((visibility("hidden")))
#endif

/* A generated function's packed entry (its argument checks, run once per call) is compiled
 * by GCC at -O1, and its compute function apart from it (never inlined into it) at the
 * level of the command line: the compute code is the same, and GCC spends about half the
 * time on the entry's hundred branches (ResNet-18's kernels: 9% of the compiler's time). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#define KILN_ENTRY __attribute__((optimize("O1")))
#define KILN_COMPUTE __attribute__((noinline))
#else
#define KILN_ENTRY
#define KILN_COMPUTE
#endif

typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;

typedef union { int64_t v_int64; double v_float64; void* v_handle; } KilnValue;

enum { KILN_INT = 0, KILN_UINT = 1, KILN_FLOAT = 2, KILN_HANDLE = 3, KILN_NULL = 4,
       KILN_DLTENSOR = 7 };
enum { KILN_DL_INT = 0, KILN_DL_UINT = 1, KILN_DL_FLOAT = 2, KILN_DL_BFLOAT = 4 };
enum { KILN_CPU = 1, KILN_CUDA = 2 };

KILN_ONCE KILN_LOCAL _Thread_local char kiln_error_buf[1024];

KILN_ONCE KILN_DLL const char* kiln_last_error(void) { return kiln_error_buf; }

static void kiln_set_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(kiln_error_buf, sizeof(kiln_error_buf), fmt, ap);
  va_end(ap);
}

/* Whether the memory spans of two tensors overlap: the argument checks reject an output
 * that overlaps another argument, since the compute function takes restrict pointers. The
 * span of a strided tensor runs from its first to its last element. An empty tensor
 * overlaps nothing. */
static inline int64_t kiln_tensor_nbytes(const DLTensor* t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->shape[d] == 0) return 0;
    n = t->strides == NULL ? n * t->shape[d] : n + (t->shape[d] - 1) * t->strides[d];
  }
  return n * ((t->dtype.bits * t->dtype.lanes + 7) / 8);
}

static inline int kiln_tensors_overlap(const DLTensor* a, const DLTensor* b) {
  uintptr_t a0 = (uintptr_t)a->data + a->byte_offset, b0 = (uintptr_t)b->data + b->byte_offset;
  int64_t na = kiln_tensor_nbytes(a), nb = kiln_tensor_nbytes(b);
  return na > 0 && nb > 0 && a0 < b0 + (uintptr_t)nb && b0 < a0 + (uintptr_t)na;
}

/* Floor division and modulo (round toward minus infinity), branch-free so that the C
 * compiler hoists and vectorizes them like plain arithmetic: the truncating quotient is one
 * too big exactly when the remainder is non-zero and its sign differs from the divisor's.
 * kiln.build emits plain / and % where it proves both operands non-negative. */
static inline int32_t kiln_floordiv_i32(int32_t a, int32_t b) {
  int32_t r = a % b; return a / b - (int32_t)((r != 0) & ((r ^ b) < 0)); }
static inline int32_t kiln_floormod_i32(int32_t a, int32_t b) {
  int32_t r = a % b; return r + (b & -(int32_t)((r != 0) & ((r ^ b) < 0))); }
static inline int64_t kiln_floordiv_i64(int64_t a, int64_t b) {
  int64_t r = a % b; return a / b - (int64_t)((r != 0) & ((r ^ b) < 0)); }
static inline int64_t kiln_floormod_i64(int64_t a, int64_t b) {
  int64_t r = a % b; return r + (b & -(int64_t)((r != 0) & ((r ^ b) < 0))); }

/* bfloat16 carried as its bits in a uint16_t (TVM's legalized bf16 storage): float32 ->
 * bf16 rounds to nearest even (a NaN stays a quiet NaN), bf16 -> float32 is exact. */
static inline uint16_t kiln_bf16_from_f32(float f) {
  uint32_t u; memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static inline float kiln_f32_from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, sizeof f); return f; }

#ifdef KILN_PACKED_CALLS
/* Calls from compiled code into the functions registered in the Python runtime
 * (tvm.tir.call_packed), defined by a source that makes such calls. When the runtime loads a
 * library that exports kiln_packed_callback it stores its callback there; the callback calls
 * the function registered as `name` with the arguments (KILN_DLTENSOR: a DLTensor*, KILN_INT,
 * KILN_FLOAT, KILN_STR: a const char*, KILN_HANDLE) and on failure writes a message into
 * `error` and returns non-zero. */
enum { KILN_STR = 11 };
typedef int32_t (*KilnPackedCallback)(const char* name, KilnValue* args, int32_t* type_codes,
                                      int32_t num_args, char* error, int32_t error_size);
KILN_ONCE KILN_DLL KilnPackedCallback kiln_packed_callback = NULL;

static int32_t kiln_call_packed(const char* name, KilnValue* args, int32_t* type_codes,
                                int32_t num_args) {
  if (kiln_packed_callback == NULL) {
    kiln_set_error("call_packed(\"%s\"): this library was loaded without the kiln runtime, "
                   "which calls registered functions; load it with kiln.runtime.load_module",
                   name);
    return -1;
  }
  return kiln_packed_callback(name, args, type_codes, num_args, kiln_error_buf,
                              (int32_t)sizeof(kiln_error_buf));
}
#endif  /* KILN_PACKED_CALLS */

#endif  /* KILN_C_RUNTIME_H_ */
