/*
 * floor_ext.c: the least any Python binding can add to the driver, for the operations whose
 * target is a ratio to raw_driver.c's C loop.
 *
 * A CPython extension with one function per driver call and nothing else: no object, no
 * check, no context bookkeeping. It lets the GIL go around the calls custream lets it go
 * around (create and destroy: a driver lock's holder may need the GIL) and keeps it for a
 * query. benches/run.py compiles it at run time against the running interpreter and the
 * paired workers time it against the raw loop in turn, as they do custream: its ratio to
 * raw is the floor of the Python side, and custream's excess over it is custream's own.
 *
 *     fdestroy(fcreate())   ~ Stream().close()
 *     fquery(H)             ~ s.query()
 *     fsync(H)              ~ s.synchronize()  (a query first, as custream does: an idle
 *                                               stream answers with the GIL held)
 *
 * The calls use the thread's current context, which the worker makes the primary context.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>

typedef int CUresult;
typedef void *CUstream;
#define CUDA_ERROR_NOT_READY 600
#define CU_STREAM_NON_BLOCKING 0x1u

static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamDestroy)(CUstream);
static CUresult (*cuStreamQuery)(CUstream);
static CUresult (*cuStreamSynchronize)(CUstream);

static PyObject *failed(const char *call, CUresult r) {
    PyErr_Format(PyExc_RuntimeError, "%s failed with CUresult %d", call, r);
    return NULL;
}

static PyObject *floor_create(PyObject *mod, PyObject *unused) {
    CUstream s;
    CUresult r;
    Py_BEGIN_ALLOW_THREADS
    r = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    Py_END_ALLOW_THREADS
    return r ? failed("cuStreamCreate", r) : PyLong_FromVoidPtr(s);
}

static PyObject *floor_destroy(PyObject *mod, PyObject *handle) {
    CUstream s = PyLong_AsVoidPtr(handle);
    CUresult r;
    if (!s && PyErr_Occurred()) return NULL;
    Py_BEGIN_ALLOW_THREADS
    r = cuStreamDestroy(s);
    Py_END_ALLOW_THREADS
    if (r) return failed("cuStreamDestroy", r);
    Py_RETURN_NONE;
}

static PyObject *floor_query(PyObject *mod, PyObject *handle) {
    CUstream s = PyLong_AsVoidPtr(handle);
    if (!s && PyErr_Occurred()) return NULL;
    CUresult r = cuStreamQuery(s);
    if (r == 0) Py_RETURN_TRUE;
    if (r == CUDA_ERROR_NOT_READY) Py_RETURN_FALSE;
    return failed("cuStreamQuery", r);
}

static PyObject *floor_sync(PyObject *mod, PyObject *handle) {
    CUstream s = PyLong_AsVoidPtr(handle);
    if (!s && PyErr_Occurred()) return NULL;
    CUresult r = cuStreamQuery(s);
    if (r == CUDA_ERROR_NOT_READY) {
        Py_BEGIN_ALLOW_THREADS
        r = cuStreamSynchronize(s);
        Py_END_ALLOW_THREADS
    }
    if (r) return failed("cuStreamSynchronize", r);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"fcreate", floor_create, METH_NOARGS, "cuStreamCreate (non-blocking), GIL released; the handle as an int."},
    {"fdestroy", floor_destroy, METH_O, "cuStreamDestroy(handle), GIL released."},
    {"fquery", floor_query, METH_O, "cuStreamQuery(handle) with the GIL held: True when idle."},
    {"fsync", floor_sync, METH_O, "cuStreamQuery(handle), then cuStreamSynchronize without the GIL if busy."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "floor_ext", NULL, -1, methods};

static void *need(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) PyErr_Format(PyExc_ImportError, "libcuda has no symbol %s", name);
    return p;
}

PyMODINIT_FUNC PyInit_floor_ext(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        PyErr_Format(PyExc_ImportError, "cannot load libcuda.so.1: %s", dlerror());
        return NULL;
    }
    if (!(cuStreamCreate = need(lib, "cuStreamCreate")) || !(cuStreamDestroy = need(lib, "cuStreamDestroy_v2")) ||
        !(cuStreamQuery = need(lib, "cuStreamQuery")) || !(cuStreamSynchronize = need(lib, "cuStreamSynchronize")))
        return NULL;
    return PyModule_Create(&module);
}
