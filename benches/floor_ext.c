/*
 * floor_ext.c: the least any Python binding can add to the driver. A CPython extension with
 * one function per driver call and nothing else (no object, no check, no context
 * bookkeeping), letting the GIL go where custream does (around create and destroy). run.py
 * builds it; the paired rounds time it against raw_driver.c's loops as they time custream:
 *     fdestroy(fcreate()) ~ Stream().close()   fquery(H) ~ s.query()
 *     fsync(H) ~ s.synchronize() (a query first, as custream does: an idle stream answers
 *                                 with the GIL held)
 *     flaunch(G, S) ~ g.launch(s) (the GIL let go, as custream, CuPy and torch do)
 * The calls use the thread's current context, which the worker makes the primary context.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>

typedef int CUresult;
typedef void *CUstream;
#define NOT_READY 600 /* CUDA_ERROR_NOT_READY */

static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamDestroy)(CUstream);
static CUresult (*cuStreamQuery)(CUstream);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuGraphLaunch)(void *, CUstream);

#define FAILED(call, r) PyErr_Format(PyExc_RuntimeError, call " failed with CUresult %d", r)

static PyObject *floor_create(PyObject *mod, PyObject *unused) {
    CUstream s;
    CUresult r;
    Py_BEGIN_ALLOW_THREADS
    r = cuStreamCreate(&s, 1 /* non-blocking */);
    Py_END_ALLOW_THREADS
    return r ? FAILED("cuStreamCreate", r) : PyLong_FromVoidPtr(s);
}

static PyObject *floor_destroy(PyObject *mod, PyObject *handle) {
    CUstream s = PyLong_AsVoidPtr(handle);
    CUresult r;
    if (!s && PyErr_Occurred()) return NULL;
    Py_BEGIN_ALLOW_THREADS
    r = cuStreamDestroy(s);
    Py_END_ALLOW_THREADS
    if (r) return FAILED("cuStreamDestroy", r);
    Py_RETURN_NONE;
}

static PyObject *floor_query(PyObject *mod, PyObject *handle) {
    CUstream s = PyLong_AsVoidPtr(handle);
    if (!s && PyErr_Occurred()) return NULL;
    CUresult r = cuStreamQuery(s);
    if (r && r != NOT_READY) return FAILED("cuStreamQuery", r);
    return PyBool_FromLong(r == 0);
}

static PyObject *floor_sync(PyObject *mod, PyObject *handle) {
    CUstream s = PyLong_AsVoidPtr(handle);
    if (!s && PyErr_Occurred()) return NULL;
    CUresult r = cuStreamQuery(s);
    if (r == NOT_READY) {
        Py_BEGIN_ALLOW_THREADS
        r = cuStreamSynchronize(s);
        Py_END_ALLOW_THREADS
    }
    if (r) return FAILED("cuStreamSynchronize", r);
    Py_RETURN_NONE;
}

static PyObject *floor_launch(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    if (n != 2) return PyErr_Format(PyExc_TypeError, "flaunch(G, S) takes 2 arguments");
    void *g = PyLong_AsVoidPtr(args[0]), *s = PyLong_AsVoidPtr(args[1]);
    if (PyErr_Occurred()) return NULL;
    CUresult r;
    Py_BEGIN_ALLOW_THREADS
    r = cuGraphLaunch(g, s);
    Py_END_ALLOW_THREADS
    if (r) return FAILED("cuGraphLaunch", r);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"fcreate", floor_create, METH_NOARGS, NULL}, {"fdestroy", floor_destroy, METH_O, NULL},
    {"fquery", floor_query, METH_O, NULL}, {"fsync", floor_sync, METH_O, NULL}, {"flaunch", (PyCFunction)(void (*)(void))floor_launch, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "floor_ext", NULL, -1, methods};

PyMODINIT_FUNC PyInit_floor_ext(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return PyErr_Format(PyExc_ImportError, "cannot load libcuda.so.1: %s", dlerror());
    if (!(cuStreamCreate = dlsym(lib, "cuStreamCreate")) || !(cuStreamDestroy = dlsym(lib, "cuStreamDestroy_v2")) ||
        !(cuStreamQuery = dlsym(lib, "cuStreamQuery")) || !(cuStreamSynchronize = dlsym(lib, "cuStreamSynchronize")) ||
        !(cuGraphLaunch = dlsym(lib, "cuGraphLaunch")))
        return PyErr_Format(PyExc_ImportError, "libcuda lacks a stream entry point");
    return PyModule_Create(&module);
}
