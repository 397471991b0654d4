/* _kiln_fastcall: the fast path for calling a compiled kiln function from Python.
 *
 * call(func_ptr, last_error_ptr, args) converts each argument to a KilnValue + type code
 * (a local NDArray -> its `_handle`, a DLTensor*; int/bool -> int64, float -> double,
 * numpy scalars -> either), calls the packed function with the GIL released, and raises
 * the registered error class with kiln_last_error()'s message when it returns non-zero.
 * Any other argument goes to the registered Python `reject(i, obj)`, which raises: an
 * object is only taken as a DLTensor address when it is an instance of NDArray.
 * Built on first use by kiln.runtime.fastcall with the kiln compiler driver.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef union { int64_t v_int64; double v_float64; void* v_handle; } KilnValue;
typedef int32_t (*kiln_packed_fn)(KilnValue*, int32_t*, int32_t);
typedef const char* (*kiln_error_fn)(void);

enum { KILN_INT = 0, KILN_FLOAT = 2, KILN_DLTENSOR = 7 };
#define KILN_STACK_ARGS 32

static PyObject* g_error_cls = NULL;   /* kiln.errors.TVMError */
static PyObject* g_np_bool = NULL;     /* numpy.bool_ */
static PyObject* g_np_integer = NULL;  /* numpy.integer */
static PyObject* g_np_floating = NULL; /* numpy.floating */
static PyTypeObject* g_ndarray = NULL; /* kiln.runtime.ndarray.NDArray */
static PyObject* g_reject = NULL;      /* kiln.runtime.fastcall.reject_argument */
static PyObject* g_handle_name = NULL; /* interned "_handle" */

static int is_instance(PyObject* obj, PyObject* cls) {
  return cls != NULL && PyObject_IsInstance(obj, cls) == 1;
}

/* Set the exception reject(i, obj) raises for an argument compiled code cannot take. */
static int reject(Py_ssize_t i, PyObject* obj) {
  if (g_reject == NULL) {
    PyErr_Format(PyExc_TypeError, "argument %zd has unsupported type '%s'", i,
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  PyObject* res = PyObject_CallFunction(g_reject, "nO", i, obj);
  Py_XDECREF(res);
  if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "argument %zd was rejected", i);
  return -1;
}

static int int_arg(PyObject* num, Py_ssize_t i, KilnValue* v) {
  long long x = PyLong_AsLongLong(num);
  if (x == -1 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
      PyErr_Clear();
      PyErr_Format(PyExc_OverflowError, "argument %zd: integer does not fit in int64", i);
    }
    return -1;
  }
  v->v_int64 = (int64_t)x;
  return 0;
}

/* Convert one argument; returns 0 or -1 with a Python exception set. */
static int convert(PyObject* obj, Py_ssize_t i, KilnValue* v, int32_t* code) {
  if (PyFloat_Check(obj)) {
    v->v_float64 = PyFloat_AS_DOUBLE(obj);
    *code = KILN_FLOAT;
    return 0;
  }
  if (PyLong_Check(obj)) {
    *code = KILN_INT;
    return int_arg(obj, i, v);
  }
  if (g_ndarray != NULL && PyObject_TypeCheck(obj, g_ndarray)) {
    PyObject* h = PyObject_GetAttr(obj, g_handle_name);
    if (h == NULL) return -1;
    void* p = PyLong_AsVoidPtr(h);
    Py_DECREF(h);
    if (p == NULL && PyErr_Occurred()) return -1;
    v->v_handle = p;
    *code = KILN_DLTENSOR;
    return 0;
  }
  if (is_instance(obj, g_np_bool)) {
    int t = PyObject_IsTrue(obj);
    if (t < 0) return -1;
    v->v_int64 = t;
    *code = KILN_INT;
    return 0;
  }
  if (is_instance(obj, g_np_integer)) {
    PyObject* num = PyNumber_Index(obj);
    if (num == NULL) return -1;
    int rc = int_arg(num, i, v);
    Py_DECREF(num);
    *code = KILN_INT;
    return rc;
  }
  if (is_instance(obj, g_np_floating)) {
    double d = PyFloat_AsDouble(obj);
    if (d == -1.0 && PyErr_Occurred()) return -1;
    v->v_float64 = d;
    *code = KILN_FLOAT;
    return 0;
  }
  return reject(i, obj);
}

static PyObject* fc_call(PyObject* self, PyObject* const* argv, Py_ssize_t argc) {
  (void)self;
  if (argc != 3) {
    PyErr_SetString(PyExc_TypeError, "call(func_ptr, error_ptr, args) takes 3 arguments");
    return NULL;
  }
  kiln_packed_fn fn = (kiln_packed_fn)PyLong_AsVoidPtr(argv[0]);
  if (fn == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "null function pointer");
    return NULL;
  }
  kiln_error_fn err_fn = (kiln_error_fn)PyLong_AsVoidPtr(argv[1]);
  if (err_fn == NULL && PyErr_Occurred()) return NULL;
  PyObject* args = argv[2];
  if (!PyTuple_Check(args)) {
    PyErr_SetString(PyExc_TypeError, "call: args must be a tuple");
    return NULL;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (n > INT32_MAX) {
    PyErr_SetString(PyExc_ValueError, "too many arguments");
    return NULL;
  }
  KilnValue stack_vals[KILN_STACK_ARGS];
  int32_t stack_codes[KILN_STACK_ARGS];
  KilnValue* vals = stack_vals;
  int32_t* codes = stack_codes;
  if (n > KILN_STACK_ARGS) {
    vals = (KilnValue*)PyMem_Malloc(sizeof(KilnValue) * (size_t)n);
    codes = (int32_t*)PyMem_Malloc(sizeof(int32_t) * (size_t)n);
    if (vals == NULL || codes == NULL) {
      PyMem_Free(vals);
      PyMem_Free(codes);
      return PyErr_NoMemory();
    }
  }
  PyObject* result = NULL;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (convert(PyTuple_GET_ITEM(args, i), i, &vals[i], &codes[i]) != 0) goto done;
  }
  int32_t ret;
  Py_BEGIN_ALLOW_THREADS
  ret = fn(vals, codes, (int32_t)n);
  Py_END_ALLOW_THREADS
  if (ret != 0) {
    const char* msg = err_fn != NULL ? err_fn() : NULL;
    PyObject* cls = g_error_cls != NULL ? g_error_cls : PyExc_RuntimeError;
    if (msg != NULL && msg[0] != '\0') {
      PyErr_SetString(cls, msg);
    } else {
      PyErr_Format(cls, "compiled function failed with status %d", (int)ret);
    }
    goto done;
  }
  result = Py_NewRef(Py_None);
done:
  if (vals != stack_vals) {
    PyMem_Free(vals);
    PyMem_Free(codes);
  }
  return result;
}

static PyObject* fc_init(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *err, *np_bool, *np_integer, *np_floating, *ndarray, *reject_fn;
  if (!PyArg_ParseTuple(args, "OOOOO!O", &err, &np_bool, &np_integer, &np_floating,
                        &PyType_Type, &ndarray, &reject_fn))
    return NULL;
  Py_XSETREF(g_error_cls, Py_NewRef(err));
  Py_XSETREF(g_np_bool, Py_NewRef(np_bool));
  Py_XSETREF(g_np_integer, Py_NewRef(np_integer));
  Py_XSETREF(g_np_floating, Py_NewRef(np_floating));
  Py_XSETREF(g_ndarray, (PyTypeObject*)Py_NewRef(ndarray));
  Py_XSETREF(g_reject, Py_NewRef(reject_fn));
  Py_RETURN_NONE;
}

static PyMethodDef fc_methods[] = {
    {"call", (PyCFunction)(void (*)(void))fc_call, METH_FASTCALL,
     "call(func_ptr, error_ptr, args): call a packed kiln function."},
    {"init", fc_init, METH_VARARGS,
     "init(error_cls, np_bool, np_integer, np_floating, ndarray_type, reject): set the "
     "classes used and the function that raises for an argument of another type."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fc_module = {
    PyModuleDef_HEAD_INIT, "_kiln_fastcall", "Fast calls into compiled kiln functions.", -1,
    fc_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kiln_fastcall(void) {
  g_handle_name = PyUnicode_InternFromString("_handle");
  if (g_handle_name == NULL) return NULL;
  return PyModule_Create(&fc_module);
}
