/*
 * A plain C extension (no Cython) using custream.h through the capsule, as a pybind11,
 * nanobind or hand-written module would. Built as C, as C++, with the limited API
 * (-DPy_LIMITED_API) and with the struct opaque (-DCUSTREAM_OPAQUE_STREAM, as under abi3t,
 * where the fields are read through the table's offsets alone): the header must serve all. MODNAME picks the module's name so
 * the same file also builds against deliberately wrong copies of the header.
 */
#include <stddef.h>

#include "custream.h"

#ifndef MODNAME
#define MODNAME c_consumer
#endif
#define STR_(x) #x
#define STR(x) STR_(x)
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

static PyObject *handle_to_int(custream_handle_t h) { return PyLong_FromVoidPtr((void *)h); }

static int int_to_handle(PyObject *obj, void *out) {
    void *p = PyLong_AsVoidPtr(obj);
    if (p == NULL && PyErr_Occurred()) return 0;
    *(custream_handle_t *)out = (custream_handle_t)p;
    return 1;
}

/* What this module was compiled against, and what the table it imported says. */
static PyObject *abi(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return Py_BuildValue("{s:i,s:I,s:I,s:I,s:O,s:{s:I,s:I,s:I,s:I,s:I}}", "compiled",
                         (int)CUSTREAM_ABI_VERSION, "table_abi", custream_capi->abi_version,
                         "api_size", custream_capi->api_size, "stream_size",
                         custream_capi->stream_size, "StreamType",
                         (PyObject *)custream_capi->StreamType, "offsets", "handle",
                         custream_capi->handle_offset, "flags", custream_capi->flags_offset,
                         "state", custream_capi->state_offset, "device",
                         custream_capi->device_offset, "priority", custream_capi->priority_offset);
}

#ifndef CUSTREAM_OPAQUE_STREAM

#define FIELD(name) #name, (Py_ssize_t)offsetof(CustreamStream, name)

/* sizeof/offsetof as this compiler sees the header, to compare with the running object. */
static PyObject *layout(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return Py_BuildValue(
        "{s:n,s:n,s:{s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n}}",
        "sizeof", (Py_ssize_t)sizeof(CustreamStream), "sizeof_capi", (Py_ssize_t)sizeof(CustreamCAPI),
        "offsetof", FIELD(handle), FIELD(protocol), FIELD(flags), FIELD(state), FIELD(device),
        FIELD(priority), FIELD(fork_generation), FIELD(reserved), FIELD(owner), FIELD(deleter),
        FIELD(deleter_ctx), FIELD(context), FIELD(weakreflist), FIELD(context_id), FIELD(stream_id));
}
#endif

static PyObject *as_stream(PyObject *self, PyObject *obj) {
    (void)self;
    return Custream_AsStream(obj);
}

static PyObject *from_handle(PyObject *self, PyObject *args) {
    custream_handle_t h;
    int device;
    PyObject *owner;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&iO", int_to_handle, &h, &device, &owner)) return NULL;
    return Custream_FromHandle(h, device, owner == Py_None ? NULL : owner);
}

/* A C owner's release: counts calls per ctx slot and remembers the handle it was given. */
#define SLOTS 64
static int deleter_calls[SLOTS];
static custream_handle_t deleter_handles[SLOTS];

static void counting_deleter(void *ctx, custream_handle_t handle) {
    size_t slot = (size_t)ctx;
    deleter_calls[slot] += 1;
    deleter_handles[slot] = handle;
}

static PyObject *from_handle_with_deleter(PyObject *self, PyObject *args) {
    custream_handle_t h;
    int device, slot;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&ii", int_to_handle, &h, &device, &slot)) return NULL;
    if (slot < 0 || slot >= SLOTS) return PyErr_Format(PyExc_ValueError, "slot %d out of range", slot);
    deleter_calls[slot] = 0;
    deleter_handles[slot] = NULL;
    return Custream_FromHandleWithDeleter(h, device, counting_deleter, (void *)(size_t)slot);
}

static PyObject *deleter_record(PyObject *self, PyObject *arg) {
    long slot = PyLong_AsLong(arg);
    (void)self;
    if (slot == -1 && PyErr_Occurred()) return NULL;
    if (slot < 0 || slot >= SLOTS) return PyErr_Format(PyExc_ValueError, "slot %ld out of range", slot);
    return Py_BuildValue("iN", deleter_calls[slot], handle_to_int(deleter_handles[slot]));
}

static PyObject *check(PyObject *self, PyObject *obj) {
    int r = Custream_Check(obj);
    (void)self;
    if (r < 0) return NULL;
    return PyBool_FromLong(r);
}

static PyObject *handle_checked(PyObject *self, PyObject *obj) {
    custream_handle_t h;
    (void)self;
    if (Custream_HandleChecked(obj, &h) < 0) return NULL;
    return handle_to_int(h);
}

#ifndef CUSTREAM_OPAQUE_STREAM
/* The fields read straight from the struct, after the type check a C consumer must do. */
static PyObject *fields(PyObject *self, PyObject *obj) {
    const CustreamStream *s = (const CustreamStream *)obj;
    (void)self;
    if (!Custream_Check(obj)) return PyErr_Format(PyExc_TypeError, "expected a custream.Stream");
    return Py_BuildValue("{s:N,s:I,s:i,s:i,s:O}", "handle", handle_to_int(Custream_Handle(s)),
                         "flags", s->flags, "device", (int)s->device, "priority", (int)s->priority,
                         "closed", Custream_IsClosed(s) ? Py_True : Py_False);
}
#endif

/* The same fields through the accessors: the table's offsets, no struct. */
static PyObject *offset_fields(PyObject *self, PyObject *obj) {
    (void)self;
    if (!Custream_Check(obj)) return PyErr_Format(PyExc_TypeError, "expected a custream.Stream");
    return Py_BuildValue("{s:N,s:I,s:i,s:i,s:O}", "handle", handle_to_int(custream_handle(obj)),
                         "flags", custream_flags(obj), "device", (int)custream_device(obj),
                         "priority", (int)custream_priority(obj), "closed",
                         custream_is_closed(obj) ? Py_True : Py_False);
}

static PyObject *synchronize(PyObject *self, PyObject *obj) {
    (void)self;
    if (Custream_Synchronize(obj) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *current_stream(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return Custream_CurrentStream();
}

static PyObject *default_stream(PyObject *self, PyObject *args) {
    custream_handle_t token;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&", int_to_handle, &token)) return NULL;
    return Custream_DefaultStream(token);
}

static PyObject *pool_get(PyObject *self, PyObject *pool) {
    (void)self;
    return Custream_PoolGet(pool);
}

static PyObject *slice(PyObject *self, PyObject *obj) {
    custream_green_ctx_t g = NULL;
    unsigned int n = 0;
    (void)self;
    if (Custream_SmCount(obj, &n) < 0 || Custream_GreenContext(obj, &g) < 0) return NULL;
    return Py_BuildValue("(NI)", PyLong_FromVoidPtr((void *)g), n);
}

static PyObject *id_and_device(PyObject *self, PyObject *obj) {
    unsigned long long id = 0;
    int device = -1;
    (void)self;
    if (Custream_StreamDevice(obj, &device) < 0 || Custream_StreamId(obj, &id) < 0) return NULL;
    return Py_BuildValue("(Ki)", id, device);
}

/* (raw or None, size, device): Custream_EventFromIpcHandle over the bytes' buffer (NULL for
 * None), with the size given apart so that a caller can misstate it. */
static PyObject *event_from_ipc_handle(PyObject *self, PyObject *args) {
    PyObject *raw;
    Py_ssize_t size;
    int device;
    const char *bytes = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oni", &raw, &size, &device)) return NULL;
    if (raw != Py_None && (bytes = PyBytes_AsString(raw)) == NULL) return NULL;
    return Custream_EventFromIpcHandle(bytes, (size_t)size, device);
}

static PyMethodDef methods[] = {
    {"abi", abi, METH_NOARGS, "ABI versions and sizes: compiled and from the imported table."},
#ifndef CUSTREAM_OPAQUE_STREAM
    {"layout", layout, METH_NOARGS, "sizeof and offsetof as compiled."},
    {"fields", fields, METH_O, "The struct's fields, read directly."},
#endif
    {"offset_fields", offset_fields, METH_O, "The fields through the table's offsets."},
    {"as_stream", as_stream, METH_O, "Custream_AsStream(obj)."},
    {"from_handle", from_handle, METH_VARARGS, "Custream_FromHandle(handle, device, owner)."},
    {"from_handle_with_deleter", from_handle_with_deleter, METH_VARARGS,
     "Custream_FromHandleWithDeleter(handle, device, counting deleter, slot)."},
    {"deleter_record", deleter_record, METH_O, "(calls, last handle) of a deleter slot."},
    {"check", check, METH_O, "Custream_Check(obj)."},
    {"handle_checked", handle_checked, METH_O, "Custream_HandleChecked(obj)."},
    {"synchronize", synchronize, METH_O, "Custream_Synchronize(obj)."},
    {"current_stream", current_stream, METH_NOARGS, "Custream_CurrentStream()."},
    {"default_stream", default_stream, METH_VARARGS, "Custream_DefaultStream(token)."},
    {"pool_get", pool_get, METH_O, "Custream_PoolGet(pool)."},
    {"slice", slice, METH_O, "(Custream_GreenContext(obj), Custream_SmCount(obj))."},
    {"event_from_ipc_handle", event_from_ipc_handle, METH_VARARGS,
     "Custream_EventFromIpcHandle(bytes or NULL, size, device)."},
    {"id_and_device", id_and_device, METH_O, "(Custream_StreamId(obj), Custream_StreamDevice(obj)); the device first."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, STR(MODNAME), NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC CAT(PyInit_, MODNAME)(void) {
    if (custream_import() < 0) return NULL;
    return PyModule_Create(&module);
}
