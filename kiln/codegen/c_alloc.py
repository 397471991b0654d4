"""Heap allocations in generated C, and what a failed one does.

An ``allocate`` too large for the stack (or of symbolic size) becomes
``kiln_alloc(count, itemsize)``: 64-byte aligned memory, or NULL, never a short block, when
the allocator refuses or ``count * itemsize`` overflows ``size_t`` (a negative count is an
empty buffer). A NULL never reaches the allocation's body: the failure is recorded in the
compute function's ``KilnAllocFailure`` (the first one, atomically: allocations inside an
OpenMP region run on several threads, and a function cannot return from inside one), the
body is skipped, and the function returns the packed call's error when it ends, so the
caller gets a ``TVMError`` and the process goes on (TVM's parallel launch likewise returns -1
when a workspace allocation fails)::

    float* B = (float*)kiln_alloc(n, 4);
    if (B == NULL) kiln_alloc_failed(&kiln_af, "B", n, 4); else { ...; free(B); }
    ...
    if (kiln_af.failed) return kiln_alloc_error(&kiln_af);

An allocation of symbolic size first tries a small buffer on the stack (``SMALL_BYTES``, the
same in every thread that runs it): a run-time size that fits uses it and nothing is
allocated or freed — a per-row scratch buffer inside a parallel loop of a kernel over a
symbolic row length costs an ``aligned_alloc``/``free`` pair per block otherwise::

    float B_small[8192] __attribute__((aligned(64)));
    float* B = (n <= 8192) ? B_small : (float*)kiln_alloc(n, 4);
    ...
    if (B != B_small) free(B);
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.ir.stmt import Allocate

from .c_types import c_scalar

if TYPE_CHECKING:
    from .codegen_c import CSourceWriter

__all__ = ["ALLOC", "SMALL_BYTES", "write_heap_allocate", "prologue", "epilogue"]

#: bytes of the stack buffer an allocation of symbolic size tries first
SMALL_BYTES = 32 * 1024

_RECORD = "kiln_af"
_HELPER_KEY = "kiln_alloc_failed"

#: the allocator, in every translation unit
ALLOC = r"""
static inline void* kiln_alloc(int64_t count, size_t itemsize) {
  size_t n = count > 0 ? (size_t)count : 0;
  if (n > (SIZE_MAX - 63) / itemsize) return NULL;
  size_t rounded = (n * itemsize + 63) / 64 * 64;
  return aligned_alloc(64, rounded ? rounded : 64);
}
"""

#: the failure record, added once to a source that allocates on the heap
_HELPER = r"""
typedef struct { int failed; const char* buffer; int64_t count; int64_t itemsize; }
    KilnAllocFailure;

static inline void kiln_alloc_failed(KilnAllocFailure* af, const char* buffer, int64_t count,
                                     int64_t itemsize) {
  if (!__atomic_exchange_n(&af->failed, 1, __ATOMIC_RELAXED)) {
    af->buffer = buffer; af->count = count; af->itemsize = itemsize;
  }
}

static int32_t kiln_alloc_error(const KilnAllocFailure* af) {
  kiln_set_error("out of memory allocating buffer %s: %lld elements of %lld bytes",
                 af->buffer, (long long)af->count, (long long)af->itemsize);
  return -1;
}
"""


def write_heap_allocate(w: CSourceWriter, s: Allocate, count: str, itemsize: int,
                        small: bool = False) -> None:
    """Emit the heap allocation of ``s`` (``count`` elements, C text), its body, the body's
    guard against a NULL and the ``free``; marks the writer's function as needing the
    failure record. ``small``: try a stack buffer of ``SMALL_BYTES`` first (a count known
    only at run time)."""
    w.helpers.setdefault(_HELPER_KEY, _HELPER)
    w.heap_allocates = True
    name = w.names.get(s.buffer_var)
    ct = c_scalar(s.dtype)
    buffer = '"' + s.buffer_var.name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    heap = f"({ct}*)kiln_alloc({count}, {itemsize})"
    stack = None
    if small and SMALL_BYTES // itemsize > 0:
        stack, fits = w.fresh(f"{name}_small"), SMALL_BYTES // itemsize
        w.emit(f"{ct} {stack}[{fits}] __attribute__((aligned(64)));")
        heap = f"(({count}) <= {fits}) ? {stack} : {heap}"
    w.emit(f"{ct}* {name} = {heap};")
    w.emit(f"if ({name} == NULL) {{")
    w.emit(f"  kiln_alloc_failed(&{_RECORD}, {buffer}, {count}, {itemsize});")
    w.emit("} else {")
    w.indent += 1
    w.stmt(s.body)
    w.emit(f"free({name});" if stack is None else f"if ({name} != {stack}) free({name});")
    w.indent -= 1
    w.emit("}")


def prologue() -> str:
    """The first statement of a function that allocates on the heap: its failure record."""
    return f"  KilnAllocFailure {_RECORD} = {{0}};"


def epilogue() -> str:
    """The last statement before the function's ``return 0``: report a failed allocation."""
    return f"  if ({_RECORD}.failed) return kiln_alloc_error(&{_RECORD});"
