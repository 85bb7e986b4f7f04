/* kiln._dispatch: the hot path of a cached kiln.jit call, in C.
 *
 * ctypes costs about a microsecond per foreign call and per marshalled
 * argument, more than libkiln's whole cached call; this module makes the
 * call with none of that. It holds:
 *   ArrayBase   the C part of kiln.Array: the kiln handle, the cached aval,
 *               and a dealloc that releases the handle directly;
 *   Dispatcher  the C part of kiln.jit's callable: a few compiled
 *               signatures of flat positional arguments (kiln.Arrays or
 *               C-contiguous NumPy arrays), matched by dtype and shape and
 *               called with one kiln_jit_call_arrays; anything else (a miss,
 *               pytrees, scalars, keywords) goes to the Python method
 *               _call_slow, which may add a signature here.
 * libkiln is not linked: bind() receives the addresses of its functions
 * from the library _lib loaded with ctypes, so that one copy of libkiln
 * (the one KILN_LIBRARY may name) serves the whole process. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>
#include <string.h>
#include <structmember.h>

#include "kiln/interop.h"
#include "kiln/jit.h"

/* libkiln's entry points this module calls, filled by bind(). */
static struct {
  __typeof__(&kiln_jit_call_arrays) jit_call_arrays;
  __typeof__(&kiln_array_release) array_release;
  __typeof__(&kiln_array_dtype) array_dtype;
  __typeof__(&kiln_array_rank) array_rank;
  __typeof__(&kiln_array_shape) array_shape;
  __typeof__(&kiln_array_from_host) array_from_host;
  __typeof__(&kiln_array_from_dlpack) array_from_dlpack;
  __typeof__(&kiln_last_error) last_error;
} K;
static PyObject *kiln_error;      /* kiln.KilnError */
static PyTypeObject *array_type;  /* kiln.Array, made by the calls */
static PyTypeObject *ndarray_type; /* numpy.ndarray */
/* NumPy inputs at least this large are viewed (DLPack), smaller ones copied:
 * the view costs a device synchronisation when it is released. */
static Py_ssize_t zero_copy_bytes = (Py_ssize_t)1 << 16;

static PyObject *raise_kiln(void) {
  PyErr_SetString(kiln_error, K.last_error());
  return NULL;
}

static void release_nogil(kiln_array *a) {
  /* Releasing a DLPack import waits for the device, whose queued work may
   * release another import whose deleter takes the GIL. */
  Py_BEGIN_ALLOW_THREADS
  K.array_release(a);
  Py_END_ALLOW_THREADS
}

/* ---- ArrayBase ---- */

typedef struct {
  PyObject_HEAD
  kiln_array *handle; /* one kiln reference, owned */
  PyObject *aval;     /* (numpy dtype, shape), NULL until known */
  PyObject *weakrefs;
} ArrayBase;

static int array_init(ArrayBase *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"handle", "aval", NULL};
  PyObject *h, *aval = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", names, &h, &aval)) return -1;
  void *p = h == Py_None ? NULL : PyLong_AsVoidPtr(h);
  if (PyErr_Occurred()) return -1;
  if (self->handle) K.array_release(self->handle);
  self->handle = p;
  Py_XSETREF(self->aval, aval == Py_None ? NULL : Py_NewRef(aval));
  return 0;
}

static void array_dealloc(ArrayBase *self) {
  if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
  if (self->handle) release_nogil(self->handle);
  Py_XDECREF(self->aval);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *array_get_handle(ArrayBase *self, void *unused) {
  if (!self->handle) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(self->handle);
}

static PyGetSetDef array_getset[] = {
    {"_handle", (getter)array_get_handle, NULL, "the kiln_array* as an int (None: released)"},
    {NULL}};
static PyMemberDef array_members[] = {
    {"_aval", T_OBJECT, offsetof(ArrayBase, aval), 0, "(dtype, shape), or None until read"},
    {NULL}};

static PyTypeObject ArrayBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._dispatch.ArrayBase",
    .tp_basicsize = sizeof(ArrayBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A kiln array handle (the C part of kiln.Array).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)array_init,
    .tp_dealloc = (destructor)array_dealloc,
    .tp_weaklistoffset = offsetof(ArrayBase, weakrefs),
    .tp_getset = array_getset,
    .tp_members = array_members,
};

/* A new kiln.Array owning `h`, with a known aval (borrowed, may be NULL). */
static PyObject *array_wrap(kiln_array *h, PyObject *aval) {
  ArrayBase *a = (ArrayBase *)array_type->tp_alloc(array_type, 0);
  if (!a) {
    release_nogil(h);
    return NULL;
  }
  a->handle = h;
  a->aval = Py_XNewRef(aval);
  return (PyObject *)a;
}

/* ---- NumPy arguments ---- */

/* The kiln dtype of a buffer's struct-module format, or KILN_INVALID_DTYPE
 * (non-native byte order, structured or unknown types). */
static kiln_dtype format_dtype(const char *f, Py_ssize_t itemsize) {
  if (*f == '@' || *f == '=' || *f == '<') f++;
  if (!f[0] || f[1]) return KILN_INVALID_DTYPE;
  static const char ints[] = "bhilq", uints[] = "BHILQ";
  if (*f == '?') return KILN_BOOL;
  if (*f == 'e') return KILN_F16;
  if (*f == 'f') return KILN_F32;
  if (*f == 'd') return KILN_F64;
  bool is_signed = strchr(ints, *f) != NULL;
  if (!is_signed && !strchr(uints, *f)) return KILN_INVALID_DTYPE;
  switch (itemsize) {
    case 1: return is_signed ? KILN_I8 : KILN_U8;
    case 2: return is_signed ? KILN_I16 : KILN_U16;
    case 4: return is_signed ? KILN_I32 : KILN_U32;
    case 8: return is_signed ? KILN_I64 : KILN_U64;
    default: return KILN_INVALID_DTYPE;
  }
}

/* A NumPy array's memory lent to kiln (zero-copy): the buffer is held until
 * kiln calls the deleter, possibly from one of its threads. */
typedef struct {
  DLManagedTensorVersioned m;
  int64_t shape[KILN_MAX_RANK];
  Py_buffer view;
} lent_buffer;

#if PY_VERSION_HEX >= 0x030D0000
#define finalizing() Py_IsFinalizing()
#else
#define finalizing() _Py_IsFinalizing()
#endif

static void lent_delete(DLManagedTensorVersioned *self) {
  lent_buffer *b = self->manager_ctx;
  if (!finalizing()) { /* else the interpreter is gone: leave it */
    PyGILState_STATE g = PyGILState_Ensure();
    PyBuffer_Release(&b->view);
    PyGILState_Release(g);
  }
  PyMem_RawFree(b);
}

/* A kiln array holding a C-contiguous buffer's data (view consumed): a copy
 * when small, bool, or donated (kiln cannot take over NumPy's memory). */
static kiln_status buffer_to_kiln(kiln_device *dev, kiln_dtype dt, Py_buffer *view, bool copy,
                                  kiln_array **out) {
  int64_t shape[KILN_MAX_RANK];
  for (int d = 0; d < view->ndim; d++) shape[d] = view->shape[d];
  if (copy || view->len < zero_copy_bytes || dt == KILN_BOOL) {
    kiln_status st = K.array_from_host(dev, dt, view->ndim, shape, view->buf, (size_t)view->len, out);
    PyBuffer_Release(view);
    return st;
  }
  lent_buffer *b = PyMem_RawCalloc(1, sizeof *b);
  if (!b) {
    PyBuffer_Release(view);
    PyErr_NoMemory();
    return KILN_ERR_OUT_OF_MEMORY;
  }
  b->view = *view;
  memcpy(b->shape, shape, sizeof shape);
  b->m.version = (DLPackVersion){DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  b->m.manager_ctx = b;
  b->m.deleter = lent_delete;
  b->m.flags = view->readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  DLTensor *t = &b->m.dl_tensor;
  t->data = view->buf;
  t->device = (DLDevice){kDLCPU, 0};
  t->ndim = view->ndim;
  t->shape = b->shape;
  /* from_dlpack maps the DLPack dtype back; give it the one kiln named. */
  static const DLDataType dl[KILN_NUM_DTYPES] = {
      [KILN_I8] = {kDLInt, 8, 1},     [KILN_I16] = {kDLInt, 16, 1},   [KILN_I32] = {kDLInt, 32, 1},
      [KILN_I64] = {kDLInt, 64, 1},   [KILN_U8] = {kDLUInt, 8, 1},    [KILN_U16] = {kDLUInt, 16, 1},
      [KILN_U32] = {kDLUInt, 32, 1},  [KILN_U64] = {kDLUInt, 64, 1},  [KILN_F16] = {kDLFloat, 16, 1},
      [KILN_F32] = {kDLFloat, 32, 1}, [KILN_F64] = {kDLFloat, 64, 1}};
  t->dtype = dl[dt];
  return K.array_from_dlpack(dev, &b->m, 0, out); /* the deleter runs on failure */
}

/* ---- Dispatcher ---- */

/* One compiled signature: `nargs` flat positional arrays. */
typedef struct {
  PyObject *owner;    /* the Python _Compiled: keeps jit and constants alive */
  kiln_jit *jit;
  kiln_device *device; /* where NumPy arguments are put */
  int nconst, nargs, nout;
  kiln_array **consts;
  kiln_dtype *dtypes;
  bool *donated; /* per argument: its array is given to the call */
  bool any_donated;
  int *ranks;
  int64_t (*shapes)[KILN_MAX_RANK];
  PyObject *out_avals; /* tuple of nout avals */
  PyObject *out_tree;  /* treedef, or NULL: the result is the single output */
} signature;

#define MAX_SIGNATURES 8
#define STACK_ARGS 16

typedef struct {
  PyObject_HEAD
  int n;
  signature sigs[MAX_SIGNATURES];
} Dispatcher;

static void signature_clear(signature *s) {
  Py_CLEAR(s->owner);
  Py_CLEAR(s->out_avals);
  Py_CLEAR(s->out_tree);
  PyMem_Free(s->consts);
  PyMem_Free(s->dtypes);
  PyMem_Free(s->donated);
  PyMem_Free(s->ranks);
  PyMem_Free(s->shapes);
  memset(s, 0, sizeof *s);
}

static void dispatcher_dealloc(Dispatcher *self) {
  for (int i = 0; i < self->n; i++) signature_clear(&self->sigs[i]);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* _add_signature(owner, jit, device, consts, in_types, out_avals, out_tree,
 * donated): consts a list of handles, in_types a list of (dtype code, shape),
 * out_tree None for a single output, donated a list of one bool per
 * argument. False when the table is full. */
static PyObject *dispatcher_add(Dispatcher *self, PyObject *args) {
  PyObject *owner, *jit, *dev, *consts, *in_types, *out_avals, *out_tree, *donated;
  if (!PyArg_ParseTuple(args, "OOOO!O!O!OO!", &owner, &jit, &dev, &PyList_Type, &consts,
                        &PyList_Type, &in_types, &PyTuple_Type, &out_avals, &out_tree,
                        &PyList_Type, &donated))
    return NULL;
  if (PyList_GET_SIZE(donated) != PyList_GET_SIZE(in_types))
    return PyErr_Format(PyExc_ValueError, "_add_signature: %zd donation flags for %zd arguments",
                        PyList_GET_SIZE(donated), PyList_GET_SIZE(in_types));
  if (self->n == MAX_SIGNATURES) Py_RETURN_FALSE;
  signature s = {0};
  s.jit = PyLong_AsVoidPtr(jit);
  s.device = PyLong_AsVoidPtr(dev);
  s.nconst = (int)PyList_GET_SIZE(consts);
  s.nargs = (int)PyList_GET_SIZE(in_types);
  s.nout = (int)PyTuple_GET_SIZE(out_avals);
  s.consts = PyMem_Calloc((size_t)s.nconst + 1, sizeof *s.consts);
  s.dtypes = PyMem_Calloc((size_t)s.nargs + 1, sizeof *s.dtypes);
  s.donated = PyMem_Calloc((size_t)s.nargs + 1, sizeof *s.donated);
  s.ranks = PyMem_Calloc((size_t)s.nargs + 1, sizeof *s.ranks);
  s.shapes = PyMem_Calloc((size_t)s.nargs + 1, sizeof *s.shapes);
  if (!s.consts || !s.dtypes || !s.donated || !s.ranks || !s.shapes) {
    PyErr_NoMemory();
    goto fail;
  }
  for (int i = 0; i < s.nconst; i++) s.consts[i] = PyLong_AsVoidPtr(PyList_GET_ITEM(consts, i));
  for (int i = 0; i < s.nargs; i++) {
    PyObject *shape;
    int code;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(in_types, i), "iO!", &code, &PyTuple_Type, &shape))
      goto fail;
    if (PyTuple_GET_SIZE(shape) > KILN_MAX_RANK) { /* kiln refuses it on the Python path */
      signature_clear(&s);
      Py_RETURN_FALSE;
    }
    s.dtypes[i] = (kiln_dtype)code;
    int d = PyObject_IsTrue(PyList_GET_ITEM(donated, i));
    if (d < 0) goto fail;
    s.donated[i] = d;
    s.any_donated |= d;
    s.ranks[i] = (int)PyTuple_GET_SIZE(shape);
    for (int d = 0; d < s.ranks[i]; d++) s.shapes[i][d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
  }
  if (PyErr_Occurred()) goto fail;
  s.owner = Py_NewRef(owner);
  s.out_avals = Py_NewRef(out_avals);
  s.out_tree = out_tree == Py_None ? NULL : Py_NewRef(out_tree);
  self->sigs[self->n++] = s;
  Py_RETURN_TRUE;
fail:
  signature_clear(&s);
  return NULL;
}

/* Whether argument `x` fits slot i of s: a kiln.Array of that type, or a
 * C-contiguous NumPy array of it (its buffer then held in *view). */
static bool arg_matches(const signature *s, int i, PyObject *x, Py_buffer *view, bool *held) {
  *held = false;
  if (PyObject_TypeCheck(x, &ArrayBase_Type)) {
    kiln_array *h = ((ArrayBase *)x)->handle;
    return h && K.array_dtype(h) == s->dtypes[i] && K.array_rank(h) == s->ranks[i] &&
           !memcmp(K.array_shape(h), s->shapes[i], (size_t)s->ranks[i] * sizeof(int64_t));
  }
  if (Py_TYPE(x) != ndarray_type) return false;
  if (PyObject_GetBuffer(x, view, PyBUF_RECORDS_RO) < 0) {
    PyErr_Clear(); /* the slow path says what is wrong */
    return false;
  }
  bool ok = view->ndim == s->ranks[i] && PyBuffer_IsContiguous(view, 'C') &&
            format_dtype(view->format, view->itemsize) == s->dtypes[i];
  for (int d = 0; ok && d < view->ndim; d++) ok = view->shape[d] == s->shapes[i][d];
  if (!ok) PyBuffer_Release(view);
  *held = ok;
  return ok;
}

/* The call for a signature whose arguments matched: views[i] (held[i]) are
 * NumPy arguments to put on the device. Consumes the views. */
static PyObject *signature_call(const signature *s, PyObject *const *args, Py_buffer *views,
                                bool *held) {
  kiln_array *stack_in[STACK_ARGS], *stack_out[STACK_ARGS], *stack_tmp[STACK_ARGS];
  int n_in = s->nconst + s->nargs;
  kiln_array **in = n_in <= STACK_ARGS ? stack_in : PyMem_Calloc((size_t)n_in, sizeof *in);
  kiln_array **tmp = s->nargs <= STACK_ARGS ? stack_tmp : PyMem_Calloc((size_t)s->nargs, sizeof *tmp);
  kiln_array **out = s->nout <= STACK_ARGS ? stack_out : PyMem_Calloc((size_t)s->nout, sizeof *out);
  PyObject *result = NULL;
  int i = 0;
  kiln_status st = KILN_OK;
  if (!in || !tmp || !out) {
    PyErr_NoMemory();
    goto done;
  }
  memcpy(in, s->consts, (size_t)s->nconst * sizeof *in);
  for (; i < s->nargs; i++) {
    tmp[i] = NULL;
    if (!held[i]) {
      in[s->nconst + i] = ((ArrayBase *)args[i])->handle;
    } else {
      held[i] = false;
      if ((st = buffer_to_kiln(s->device, s->dtypes[i], &views[i], s->donated[i], &tmp[i]))) {
        i++;
        goto done;
      }
      in[s->nconst + i] = tmp[i];
    }
  }
  Py_BEGIN_ALLOW_THREADS
  st = K.jit_call_arrays(s->jit, (size_t)n_in, in, (size_t)s->nout, out);
  for (int k = 0; k < s->nargs; k++) K.array_release(tmp[k]);
  Py_END_ALLOW_THREADS
  i = 0;
  if (st) goto done;
  PyObject *list = s->out_tree || s->nout != 1 ? PyList_New(s->nout) : NULL;
  for (int k = 0; k < s->nout; k++) {
    PyObject *a = array_wrap(out[k], PyTuple_GET_ITEM(s->out_avals, k));
    if (!a) {
      for (int r = k + 1; r < s->nout; r++) release_nogil(out[r]);
      Py_XDECREF(list);
      goto done;
    }
    if (!list) result = a;
    else PyList_SET_ITEM(list, k, a);
  }
  if (list) {
    result = s->out_tree ? PyObject_CallMethod(s->out_tree, "unflatten", "O", list)
                         : PyList_AsTuple(list);
    Py_DECREF(list);
  }
done:
  for (int k = 0; k < i; k++) release_nogil(tmp[k]);
  for (int k = 0; k < s->nargs; k++)
    if (held[k]) PyBuffer_Release(&views[k]);
  if (st && !PyErr_Occurred()) raise_kiln();
  if (in != stack_in) PyMem_Free(in);
  if (tmp != stack_tmp) PyMem_Free(tmp);
  if (out != stack_out) PyMem_Free(out);
  return result;
}

static PyObject *dispatcher_call(Dispatcher *self, PyObject *args, PyObject *kw) {
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  if ((!kw || !PyDict_GET_SIZE(kw)) && n <= STACK_ARGS) {
    PyObject *const *items = &PyTuple_GET_ITEM(args, 0);
    Py_buffer views[STACK_ARGS];
    bool held[STACK_ARGS];
    for (int k = 0; k < self->n; k++) {
      const signature *s = &self->sigs[k];
      if (s->nargs != n) continue;
      int i = 0;
      while (i < n && arg_matches(s, i, items[i], &views[i], &held[i])) i++;
      if (i == n) {
        PyObject *r = signature_call(s, items, views, held);
        /* A donation kiln refused (before running anything): the Python
         * path says which argument, by its name. */
        if (r || !s->any_donated || !PyErr_ExceptionMatches(kiln_error)) return r;
        PyErr_Clear();
        break;
      }
      while (i-- > 0)
        if (held[i]) PyBuffer_Release(&views[i]);
    }
  }
  PyObject *slow = PyObject_GetAttrString((PyObject *)self, "_call_slow");
  if (!slow) return NULL;
  PyObject *r = PyObject_Call(slow, args, kw);
  Py_DECREF(slow);
  return r;
}

static PyObject *dispatcher_count(Dispatcher *self, PyObject *unused) {
  return PyLong_FromLong(self->n);
}

static PyMethodDef dispatcher_methods[] = {
    {"_add_signature", (PyCFunction)dispatcher_add, METH_VARARGS,
     "Registers a compiled signature for the C call path."},
    {"_signature_count", (PyCFunction)dispatcher_count, METH_NOARGS,
     "How many signatures the C call path holds."},
    {NULL}};

static PyTypeObject Dispatcher_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._dispatch.Dispatcher",
    .tp_basicsize = sizeof(Dispatcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The C call path of kiln.jit's callable.",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)dispatcher_dealloc,
    .tp_call = (ternaryfunc)dispatcher_call,
    .tp_methods = dispatcher_methods,
};

/* ---- module ---- */

/* bind(functions, KilnError, Array, numpy.ndarray, zero_copy_bytes):
 * functions maps each libkiln name in K to its address. */
static PyObject *bind(PyObject *mod, PyObject *args) {
  PyObject *fns, *err, *arr, *nd;
  if (!PyArg_ParseTuple(args, "O!OO!O!n", &PyDict_Type, &fns, &err, &PyType_Type, &arr,
                        &PyType_Type, &nd, &zero_copy_bytes))
    return NULL;
  if (!PyType_IsSubtype((PyTypeObject *)arr, &ArrayBase_Type))
    return PyErr_Format(PyExc_TypeError, "%R does not derive from ArrayBase", arr);
  static const struct {
    const char *name;
    size_t offset;
  } slots[] = {
#define SLOT(f) {"kiln_" #f, offsetof(__typeof__(K), f)}
      SLOT(jit_call_arrays), SLOT(array_release), SLOT(array_dtype),     SLOT(array_rank),
      SLOT(array_shape),     SLOT(array_from_host), SLOT(array_from_dlpack), SLOT(last_error),
#undef SLOT
  };
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
    PyObject *addr = PyDict_GetItemString(fns, slots[i].name);
    void *p = addr ? PyLong_AsVoidPtr(addr) : NULL;
    if (!p) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_KeyError, "bind: no address for %s", slots[i].name);
      return NULL;
    }
    memcpy((char *)&K + slots[i].offset, &p, sizeof p);
  }
  Py_XSETREF(kiln_error, Py_NewRef(err));
  Py_XSETREF(array_type, (PyTypeObject *)Py_NewRef(arr));
  Py_XSETREF(ndarray_type, (PyTypeObject *)Py_NewRef(nd));
  Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"bind", bind, METH_VARARGS, "Gives the module libkiln's functions and kiln's types."},
    {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kiln._dispatch",
                                    "The C call path of kiln.jit (see _dispatch.c).", -1,
                                    module_methods};

PyMODINIT_FUNC PyInit__dispatch(void) {
  if (PyType_Ready(&ArrayBase_Type) < 0 || PyType_Ready(&Dispatcher_Type) < 0) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "ArrayBase", (PyObject *)&ArrayBase_Type) < 0 ||
      PyModule_AddObjectRef(m, "Dispatcher", (PyObject *)&Dispatcher_Type) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
