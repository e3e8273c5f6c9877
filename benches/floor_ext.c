/* floor_ext.c: the least a Python binding can add to the driver (docs/benchmarks.md): a function per driver call, no
 * object, no check, the GIL let go where custream does, in the current context; fstream(H).handle, the least a C type
 * can do for a handle attribute (a getset, no driver call); `with fs.lease(): pass`, CPython's own `with` floor. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "raw_driver.c" /* the driver's entry points: raw_load() */

#define NOT_READY 600 /* CUDA_ERROR_NOT_READY */
#define FAILED(call, r) PyErr_Format(PyExc_RuntimeError, call " failed with CUresult %d", r)
#define DONE(call, r) ((r) ? FAILED(call, r) : Py_NewRef(Py_None))
#define NOGIL(stmt) do { Py_BEGIN_ALLOW_THREADS stmt; Py_END_ALLOW_THREADS } while (0)
#define STREAM(s, arg) CUstream s = PyLong_AsVoidPtr(arg); if (!s && PyErr_Occurred()) return NULL /* an int's */
#define FASTCALL(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL

static PyObject *floor_create(PyObject *mod, PyObject *unused) {
    CUstream s;
    CUresult r;
    NOGIL(r = cuStreamCreate(&s, 1 /* non-blocking */));
    return r ? FAILED("cuStreamCreate", r) : PyLong_FromVoidPtr(s);
}

static PyObject *floor_destroy(PyObject *mod, PyObject *handle) {
    STREAM(s, handle);
    CUresult r;
    NOGIL(r = cuStreamDestroy_v2(s));
    return DONE("cuStreamDestroy", r);
}

static PyObject *floor_query(PyObject *mod, PyObject *handle) {
    STREAM(s, handle);
    CUresult r = cuStreamQuery(s);
    return r && r != NOT_READY ? FAILED("cuStreamQuery", r) : PyBool_FromLong(r == 0);
}

static PyObject *floor_sync(PyObject *mod, PyObject *handle) { /* a query first, as custream does */
    STREAM(s, handle);
    CUresult r = cuStreamQuery(s);
    if (r == NOT_READY) NOGIL(r = cuStreamSynchronize(s));
    return DONE("cuStreamSynchronize", r);
}

static PyObject *floor_launch(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    if (n != 2) return PyErr_Format(PyExc_TypeError, "flaunch(G, S) takes 2 arguments");
    void *g = PyLong_AsVoidPtr(args[0]), *s = PyLong_AsVoidPtr(args[1]);
    if (PyErr_Occurred()) return NULL;
    CUresult r;
    NOGIL(r = cuGraphLaunch(g, s));
    return DONE("cuGraphLaunch", r);
}

/* fwrite(S, W, v) / fwait(S, W, v): the 32-bit memory operations, each after the driver calls custream makes first. */
static PyObject *floor_memop(PyObject *const *args, Py_ssize_t n, int wait) {
    if (n != 3) return PyErr_Format(PyExc_TypeError, "fwrite/fwait(S, W, v) take 3 arguments");
    CUstream s = PyLong_AsVoidPtr(args[0]);
    unsigned long long w = PyLong_AsUnsignedLongLong(args[1]);
    unsigned long v = PyLong_AsUnsignedLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    ask(s, w);
    CUresult r = failed ? failed : wait ? cuStreamWaitValue32_v2(s, w, v, 0) : cuStreamWriteValue32_v2(s, w, v, 0);
    return DONE("cuStreamWrite/WaitValue32", r);
}
static PyObject *floor_write(PyObject *m, PyObject *const *a, Py_ssize_t n) { return floor_memop(a, n, 0); }
static PyObject *floor_wait(PyObject *m, PyObject *const *a, Py_ssize_t n) { return floor_memop(a, n, 1); }

/* fpolicy(H) / fsetpolicy(H, v): the stream's synchronization policy as an int, read or set, as `s.sync_policy` does
 * less its names and checks. */
static PyObject *floor_policy(PyObject *mod, PyObject *handle) {
    STREAM(s, handle);
    AttrValue v = {{0}};
    CUresult r = cuStreamGetAttribute(s, SYNC_POLICY, &v);
    return r ? FAILED("cuStreamGetAttribute", r) : PyLong_FromLong(v.policy);
}
static PyObject *floor_set_policy(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    if (n != 2) return PyErr_Format(PyExc_TypeError, "fsetpolicy(H, v) takes 2 arguments");
    CUstream s = PyLong_AsVoidPtr(args[0]);
    AttrValue v = {{0}};
    v.policy = (int)PyLong_AsLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    return DONE("cuStreamSetAttribute", cuStreamSetAttribute(s, SYNC_POLICY, &v));
}

/* FloorStream: its handle, an int, and the getset `handle` that returns it, no check. */
typedef struct { PyObject_HEAD PyObject *handle; } FloorStream;
static PyObject *fs_handle(PyObject *fs, void *closure) { return Py_NewRef(((FloorStream *)fs)->handle); }
static PyObject *fs_self(PyObject *fs, PyObject *unused) { return Py_NewRef(fs); }
static PyObject *fs_exit(PyObject *fs, PyObject *const *args, Py_ssize_t n) { Py_RETURN_NONE; }
static void fs_dealloc(PyObject *fs) { Py_DECREF(((FloorStream *)fs)->handle); PyObject_Free(fs); }
static PyGetSetDef fs_getset[] = {{"handle", fs_handle, NULL, NULL, NULL}, {NULL}};
static PyMethodDef fs_methods[] = {{"lease", fs_self, METH_NOARGS, NULL}, {"__enter__", fs_self, METH_NOARGS, NULL},
                                   {"__exit__", FASTCALL(fs_exit), NULL}, {NULL, NULL, 0, NULL}};
static PyTypeObject fs_type = {PyVarObject_HEAD_INIT(NULL, 0).tp_name = "floor_ext.FloorStream",
    .tp_basicsize = sizeof(FloorStream), .tp_flags = Py_TPFLAGS_DEFAULT, .tp_dealloc = fs_dealloc,
    .tp_getset = fs_getset, .tp_methods = fs_methods};

static PyObject *floor_stream(PyObject *mod, PyObject *handle) {
    if (!PyLong_Check(handle)) return PyErr_Format(PyExc_TypeError, "fstream(H) takes an int");
    FloorStream *fs = PyObject_New(FloorStream, &fs_type);
    if (fs) fs->handle = Py_NewRef(handle);
    return (PyObject *)fs;
}

static PyMethodDef driver_methods[] = {{"fcreate", floor_create, METH_NOARGS, NULL},
    {"fdestroy", floor_destroy, METH_O, NULL}, {"fquery", floor_query, METH_O, NULL},
    {"fsync", floor_sync, METH_O, NULL}, {"flaunch", FASTCALL(floor_launch), NULL},
    {"fwrite", FASTCALL(floor_write), NULL}, {"fwait", FASTCALL(floor_wait), NULL},
    {"fpolicy", floor_policy, METH_O, NULL}, {"fsetpolicy", FASTCALL(floor_set_policy), NULL}, {NULL, NULL, 0, NULL}};
static PyMethodDef methods[] = {{"fstream", floor_stream, METH_O, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "floor_ext", NULL, -1, methods};

/* The driver's functions only where libcuda.so.1 loads (with every entry point): fstream needs none. */
PyMODINIT_FUNC PyInit_floor_ext(void) {
    PyObject *mod = NULL;
    if (PyType_Ready(&fs_type) == 0 && (mod = PyModule_Create(&module)) && raw_load() == 0 &&
        PyModule_AddFunctions(mod, driver_methods) < 0)
        Py_CLEAR(mod);
    return mod;
}
