//! The Python face of the Stream object: its slots, methods and getters, each a safe
//! function, and the type declared from them with `stream_type!` (src/cpython/stream_type.rs
//! builds it with PyType_FromSpec, `tp_basicsize` being `sizeof(CustreamStream)`: the C
//! layout pxd/custream.h declares, which pyo3's #[pyclass] layout is not).

use std::ffi::CStr;

use pyo3::basic::CompareOp;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString, PyTuple, PyType};

use crate::cpython::args::{bool_arg, device_arg, i32_arg, short_repr, Signature};
use crate::cpython::interrupt::{timeout_arg, Deadline};
use crate::cpython::raw_call::{Fastcall, TupleDict};
use crate::cpython::stream_object::{self, StreamObject};
use crate::cpython::stream_type::stream_type;
use crate::driver::capture_guard;
use crate::driver::CaptureMode;
use crate::event::{self, Event};
use crate::graph::Graph;
use crate::green::{self, green_context_arg};
use crate::host;
use crate::memops;
use crate::object::make::{self, Parts};
use crate::object::protocol::{self, handle_from_int};
use crate::stream::{self, closed_error};
use crate::stream::{current, settings};
use crate::waits::notifiers;

const DOC: &CStr = c"Stream(*, device=None, non_blocking=True, priority=0, green_context=None, sync_policy=None)
--

A CUDA stream shared by Python, Cython and C, speaking the CUDA Stream Protocol.

``Stream()`` creates an owned stream in the device's primary context (``device`` defaults to
the current context's device, else 0) and leaves the thread's current context as it was;
with ``green_context=gc`` (a custream.GreenContext) it is made in that green context instead,
its work running on that context's SMs only, and keeps ``gc`` open; it must then be
non-blocking, and ``device`` left out or ``gc.device``. ``sync_policy`` ('auto', 'spin',
'yield' or 'blocking') sets the stream's ``sync_policy`` as it is made.
``Stream.from_handle(handle, owner=...)`` and ``custream.as_stream(obj)`` wrap a stream
somebody else made, keeping its owner alive. ``with s:`` makes ``s`` the current stream
(``custream.current_stream()``) for the block and closes nothing. ``close()`` destroys an
owned stream and lets go of a borrowed one's owner; after it, every handle accessor raises
ValueError. Two Streams over one handle are equal (``==``, and their hashes); streams have
no order (``<`` raises TypeError).";

fn none(py: Python<'_>) -> Py<PyAny> {
    py.None()
}

fn py_bool(py: Python<'_>, b: bool) -> Py<PyAny> {
    PyBool::new(py, b).to_owned().into_any().unbind()
}

/// A TypeError naming the type of `got`.
fn type_name(got: &Bound<'_, PyAny>) -> String {
    got.get_type().name().map(|n| n.to_string()).unwrap_or_default()
}

// ---- slots ------------------------------------------------------------------------------

static NEW_SIG: Signature = Signature {
    name: "Stream",
    positional: &[],
    keyword_only: &["device", "non_blocking", "priority", "green_context", "sync_policy"],
    required: 0,
};

fn new(py: Python<'_>, args: TupleDict<'_, '_>) -> PyResult<Py<PyAny>> {
    let [device, non_blocking, priority, green, policy] = NEW_SIG.parse_tuple_dict::<5>(&args)?;
    let device = device_arg(device.as_ref(), "Stream")?;
    let non_blocking = bool_arg(non_blocking.as_ref(), "Stream", "non_blocking", true)?;
    let priority = i32_arg(priority.as_ref(), "Stream", "priority", 0)?;
    let policy = make::sync_policy_arg(policy.as_ref(), "Stream")?;
    let made = match green_context_arg(green.as_ref(), "Stream", device, non_blocking)? {
        Some(gc) => green::create_stream(py, &gc, priority, false, "Stream()")?,
        None => make::create(py, device, non_blocking, priority, false)?,
    };
    make::with_sync_policy(&made, policy)?;
    notifiers::prepare(py, &made);
    Ok(made.unbind())
}

fn clear(s: StreamObject<'_>, py: Python<'_>) {
    // Only cyclic garbage is cleared: release it now, as deallocation would.
    s.close_quietly(py);
}

fn repr(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    let what = match s.handle_value() {
        0 => "null (default) stream".to_owned(),
        1 => "LEGACY_DEFAULT_STREAM".to_owned(),
        2 => "PER_THREAD_DEFAULT_STREAM".to_owned(),
        h => format!("handle={h:#x}"),
    };
    let device = match (s.is_default(), s.known_device()) {
        (true, _) => " device=current".to_owned(),
        (false, Some(d)) => format!(" device={d}"),
        (false, None) => String::new(),
    };
    let how = if s.is_closed() {
        " closed".to_owned()
    } else if s.is_shared() {
        " shared".to_owned()
    } else if s.is_pooled() {
        format!(
            " owned by a StreamPool{}",
            if s.is_green() { " in a green context" } else { "" }
        )
    } else if s.is_green() {
        " owned in a green context".to_owned()
    } else if s.is_owned() {
        " owned".to_owned()
    } else if let Some(owner) = s.owner_while_open(py) {
        format!(" borrowed from {}", owner.get_type().fully_qualified_name()?)
    } else if s.has_deleter() {
        " borrowed with deleter".to_owned()
    } else {
        " borrowed".to_owned()
    };
    Ok(PyString::new(py, &format!("<custream.Stream {what}{device}{how}>"))
        .into_any()
        .unbind())
}

/// CPython's modulus for hashing numbers (`sys.hash_info.modulus`): 2**61 - 1 where
/// `Py_hash_t` has 64 bits, 2**31 - 1 where it has 32.
const HASH_MODULUS: u64 = if std::mem::size_of::<isize>() == 8 {
    (1 << 61) - 1
} else {
    (1 << 31) - 1
};

/// `hash(v)` for the int `v` (`Py_hash_t` is a `Py_ssize_t`, an isize), computed as CPython
/// does with no call into it: a non-negative
/// int hashes to itself modulo HASH_MODULUS, which is below 2**(bits - 1) - 1, so the result
/// is never -1 (the value CPython reserves for an error).
#[inline]
fn int_hash(v: u64) -> isize {
    (v % HASH_MODULUS) as isize
}

/// The handle's int hash, so that hash(s) == hash(s.handle) and equal streams hash alike.
fn hash(s: StreamObject<'_>, _: Python<'_>) -> isize {
    int_hash(s.handle_value())
}

/// `==` and `!=`: two Streams over one handle are equal. Streams have no order: the other
/// comparisons return NotImplemented, so `a < b` raises TypeError (and the type's dict holds
/// no `__lt__` and others for help() to list: `stream_type::equality_only`).
fn richcompare(a: StreamObject<'_>, py: Python<'_>, b: Option<Borrowed<'_, '_, PyAny>>, op: CompareOp) -> Py<PyAny> {
    let b = b.as_deref().and_then(StreamObject::cast);
    match (b, op) {
        (Some(b), CompareOp::Eq) => py_bool(py, a.handle_value() == b.handle_value()),
        (Some(b), CompareOp::Ne) => py_bool(py, a.handle_value() != b.handle_value()),
        _ => py.NotImplemented(),
    }
}

// ---- methods ----------------------------------------------------------------------------
// The getters that return a `Py<PyAny>` (not a `PyResult`), tp_hash and tp_richcompare skip
// `boundary`: they only read fields and call CPython, no Rust code there can panic.

fn cuda_stream(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    if s.is_closed() {
        return Err(closed_error("__cuda_stream__()"));
    }
    Ok(s.protocol(py).to_owned().into_any().unbind())
}

static FROM_HANDLE_SIG: Signature = Signature {
    name: "from_handle",
    positional: &["handle"],
    keyword_only: &["owner", "device"],
    required: 1,
};

fn from_handle(py: Python<'_>, args: Fastcall<'_, '_>) -> PyResult<Py<PyAny>> {
    let [handle_obj, owner, device] = FROM_HANDLE_SIG.parse_fastcall::<3>(&args)?;
    let handle_obj =
        handle_obj.ok_or_else(|| PyTypeError::new_err("from_handle() missing required argument 'handle'"))?;
    if stream_object::is_stream(&handle_obj) {
        return Err(PyTypeError::new_err(
            "from_handle() handle must be an int, got custream.Stream: a Stream needs no \
             wrapping, use it as it is (custream.as_stream(obj) returns a Stream unchanged)",
        ));
    }
    let handle = handle_from_int(&handle_obj, || "from_handle() handle".to_owned())?;
    let device = device_arg(device.as_ref(), "from_handle")?;
    let owner = owner.filter(|o| !o.is_none());
    let mut parts = Parts::borrowed(handle, device, owner)?;
    // The caller's int, when it is a plain int, is the one `handle` returns: no new int.
    if handle_obj.is_exact_instance_of::<PyInt>() {
        parts.protocol = Some(PyTuple::new(py, [PyInt::new(py, 0u8).into_any(), handle_obj])?);
    }
    Ok(make::make(py, parts)?.unbind())
}

static SYNCHRONIZE_SIG: Signature = Signature {
    name: "synchronize",
    positional: &["timeout"],
    keyword_only: &[],
    required: 0,
};

fn synchronize(s: StreamObject<'_>, py: Python<'_>, args: Fastcall<'_, '_>) -> PyResult<Py<PyAny>> {
    if args.is_empty() {
        s.synchronize_until(py, Deadline::NEVER)?;
    } else {
        let [timeout] = SYNCHRONIZE_SIG.parse_fastcall::<1>(&args)?;
        s.synchronize_until(py, timeout_arg(timeout.as_ref(), "Stream.synchronize")?)?;
    }
    Ok(none(py))
}

fn query(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(py_bool(py, s.query(py)?))
}

fn wait(s: StreamObject<'_>, py: Python<'_>, other: Option<Borrowed<'_, '_, PyAny>>) -> PyResult<Py<PyAny>> {
    // A closed stream refuses before `other` is looked at, which may call the driver.
    if s.is_closed() {
        return Err(closed_error("wait()"));
    }
    let other = other.ok_or_else(|| PyTypeError::new_err("wait() missing required argument 'other'"))?;
    if let Ok(event) = other.cast::<Event>() {
        event::stream_methods::wait_event(s, &event)?;
        return Ok(none(py));
    }
    let upstream = protocol::as_stream(&other).map_err(|e| {
        if e.is_instance_of::<PyTypeError>(py) {
            PyTypeError::new_err(format!(
                "wait() expected a custream.Event, a custream.Stream or an object with __cuda_stream__(), got {}",
                type_name(&other)
            ))
        } else {
            e
        }
    })?;
    event::stream_methods::wait_stream(py, s, StreamObject::of(&upstream, "wait()")?)?;
    Ok(none(py))
}

static RECORD_SIG: Signature = Signature {
    name: "record",
    positional: &["event"],
    keyword_only: &[],
    required: 0,
};

fn record(s: StreamObject<'_>, py: Python<'_>, args: Fastcall<'_, '_>) -> PyResult<Py<PyAny>> {
    let [event] = RECORD_SIG.parse_fastcall::<1>(&args)?;
    let event = match event.filter(|e| !e.is_none()) {
        Some(e) => Some(e.cast_into::<Event>().map_err(|e| {
            PyTypeError::new_err(format!(
                "record() event must be a custream.Event or None, got {}",
                type_name(&e.into_inner())
            ))
        })?),
        None => None,
    };
    Ok(event::stream_methods::record(py, s, event)?.into_any().unbind())
}

fn close(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    s.close(py)?;
    Ok(none(py))
}

fn enter(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    if s.is_closed() {
        return Err(closed_error("__enter__()"));
    }
    let obj = s.object(py);
    current::enter(py, &obj)?;
    Ok(obj.unbind())
}

fn exit(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    current::exit(py, &s.object(py))?;
    Ok(py_bool(py, false))
}

fn reduce(_: StreamObject<'_>, _: Python<'_>) -> PyResult<Py<PyAny>> {
    Err(PyTypeError::new_err(
        "cannot pickle custream.Stream: a CUDA stream handle is only meaningful in the process \
         that made it; send the device ordinal and make a stream on the other side",
    ))
}

fn launch_host_func(s: StreamObject<'_>, py: Python<'_>, args: Fastcall<'_, '_>) -> PyResult<Py<PyAny>> {
    let mut all = args.positional();
    let function = all
        .next()
        .ok_or_else(|| PyTypeError::new_err("launch_host_func() missing required argument 'fn'"))?;
    let rest = PyTuple::new(py, all)?;
    host::functions::launch(py, s, function.to_owned(), rest)?;
    Ok(none(py))
}

static BEGIN_SIG: Signature = Signature {
    name: "begin_capture",
    positional: &["mode"],
    keyword_only: &[],
    required: 0,
};

fn begin_capture(s: StreamObject<'_>, py: Python<'_>, args: Fastcall<'_, '_>) -> PyResult<Py<PyAny>> {
    let [mode] = BEGIN_SIG.parse_fastcall::<1>(&args)?;
    s.begin_capture(py, capture_mode(mode.as_ref())?)?;
    Ok(none(py))
}

/// `mode=` of `begin_capture`.
fn capture_mode(mode: Option<&Bound<'_, PyAny>>) -> PyResult<CaptureMode> {
    let Some(mode) = mode else {
        return Ok(CaptureMode::ThreadLocal);
    };
    let text: String = mode
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("begin_capture() mode must be a str, got {}", type_name(mode))))?;
    [CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed]
        .into_iter()
        .find(|&m| capture_guard::mode_name(m) == text)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "begin_capture() mode must be 'thread_local', 'global' or 'relaxed', got {}",
                short_repr(mode)
            ))
        })
}

fn write_value(s: StreamObject<'_>, py: Python<'_>, args: Fastcall<'_, '_>) -> PyResult<Py<PyAny>> {
    memops::write_value(py, s, &args).map(|()| none(py))
}

fn wait_value(s: StreamObject<'_>, py: Python<'_>, args: Fastcall<'_, '_>) -> PyResult<Py<PyAny>> {
    memops::wait_value(py, s, &args).map(|()| none(py))
}

fn keep_alive(s: StreamObject<'_>, py: Python<'_>, args: Fastcall<'_, '_>) -> PyResult<Py<PyAny>> {
    let objs = PyTuple::new(py, args.positional())?;
    host::keep_alive::keep_alive(py, s, objs)?;
    Ok(none(py))
}

fn end_capture(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(Bound::new(py, Graph::end_capture(py, s)?)?.into_any().unbind())
}

// ---- getters ----------------------------------------------------------------------------

fn get_handle(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    if s.is_closed() {
        return Err(closed_error("handle"));
    }
    // The int already in the (0, handle) tuple: no allocation.
    Ok(s.protocol(py).get_borrowed_item(1)?.to_owned().unbind())
}

fn get_flags(s: StreamObject<'_>, py: Python<'_>) -> Py<PyAny> {
    s.flags()
        .into_pyobject(py)
        .map_or_else(|e| match e {}, |i| i.into_any().unbind())
}

fn get_device(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(s.device(py)?.into_pyobject(py)?.into_any().unbind())
}

fn get_id(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(s.id(py)?.unbind())
}

fn get_owned(s: StreamObject<'_>, py: Python<'_>) -> Py<PyAny> {
    py_bool(py, s.is_owned())
}

fn get_owner(s: StreamObject<'_>, py: Python<'_>) -> Py<PyAny> {
    match s.owner_while_open(py) {
        Some(o) => o.unbind(),
        None => none(py),
    }
}

fn get_is_default(s: StreamObject<'_>, py: Python<'_>) -> Py<PyAny> {
    py_bool(py, s.is_default())
}

fn get_non_blocking(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(py_bool(py, s.non_blocking(py)?))
}

fn get_priority(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(s.priority(py)?.into_pyobject(py)?.into_any().unbind())
}

fn get_closed(s: StreamObject<'_>, py: Python<'_>) -> Py<PyAny> {
    py_bool(py, s.is_closed())
}

fn get_is_capturing(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(py_bool(py, s.is_capturing(py)?))
}

fn get_green_context(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    match s.green_context(py)? {
        Some(gc) => Ok(gc.into_any().unbind()),
        None => Ok(none(py)),
    }
}

fn get_sm_count(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(s.sm_count(py)?.into_pyobject(py)?.into_any().unbind())
}

// ---- the type ---------------------------------------------------------------------------

/// `Stream.__new__(cls, **kwargs)`: what `Stream(**kwargs)` does, for `cls` the Stream type
/// (in place of CPython's generic wrapper, so that help() shows the signature).
fn new_static(py: Python<'_>, args: TupleDict<'_, '_>) -> PyResult<Py<PyAny>> {
    let positional = args.args.map(|a| a.to_owned());
    let cls = positional.as_ref().and_then(|a| a.get_item(0).ok());
    let Some(cls) = cls else {
        return Err(PyTypeError::new_err("Stream.__new__(): not enough arguments"));
    };
    let stream_type = stream_object::stream_type(py);
    if !stream_type.is_some_and(|t| t.is(&cls)) {
        return Err(PyTypeError::new_err(format!(
            "Stream.__new__(X): X must be custream.Stream, got {}",
            short_repr(&cls)
        )));
    }
    let rest = positional.map(|a| a.get_slice(1, a.len()));
    new(
        py,
        TupleDict {
            args: rest.as_ref().map(|r| r.as_borrowed()),
            kwargs: args.kwargs,
        },
    )
}

/// Build the Stream type (once per process) and remember it.
pub fn create(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    stream_type!(
        py,
        doc: DOC,
        new: new,
        dealloc: stream::release_at_dealloc,
        clear: clear,
        repr: repr,
        hash: hash,
        richcompare: richcompare,
        methods: [
            (static_new, c"__new__", new_static, c"__new__(cls, /, *, device=None, non_blocking=True, priority=0, green_context=None, sync_policy=None)\n--\n\nCreate a custream.Stream: what ``Stream(...)`` does (see help(custream.Stream))."),
            (noargs, c"__cuda_stream__", cuda_stream, c"__cuda_stream__($self, /)\n--\n\nThe CUDA Stream Protocol: (0, handle), both ints."),
            (static_fastcall, c"from_handle", from_handle, c"from_handle(handle, *, owner=None, device=None)\n--\n\nWrap an existing CUDA stream handle (an int) without calling the driver.\n\n``owner`` is kept alive until the stream is closed or deallocated; ``device``\nspares a driver call when ``.device`` is read. 0, 1 and 2 are the default-stream\ntokens (null, legacy, per-thread)."),
            (fastcall, c"synchronize", synchronize, c"synchronize($self, /, timeout=None)\n--\n\nWait for all work queued on the stream so far, with the GIL released.\n\n``timeout``: seconds (int or float), or None to wait as long as it takes; when the\nwork is not done by then, ``TimeoutError`` (the stream and its work are untouched).\nOn the main thread the wait ends within 50 ms of a signal whose handler raises\n(Ctrl-C's ``KeyboardInterrupt``), with that exception."),
            (noargs, c"query", query, c"query($self, /)\n--\n\nTrue if all work on the stream is done, False if some is pending."),
            (o, c"wait", wait, c"wait($self, other, /)\n--\n\nMake later work on this stream wait for ``other``: a custream.Event, or the\nwork queued so far on a custream.Stream or any ``__cuda_stream__`` object."),
            (fastcall, c"record", record, c"record($self, /, event=None)\n--\n\nRecord ``event`` (a new custream.Event if None) on this stream and return it."),
            (noargs, c"close", close, c"close($self, /)\n--\n\nDestroy an owned stream, or release a borrowed one's owner or deleter.\nIdempotent and thread-safe; afterwards every handle accessor raises ValueError.\nRefused (ValueError) for the module's default streams and for a StreamPool's streams."),
            (noargs, c"__enter__", enter, c"__enter__($self, /)\n--\n\nMake the stream current (custream.current_stream()) until the block ends."),
            (varargs, c"__exit__", exit, c"__exit__($self, exc_type, exc_value, traceback, /)\n--\n\nMake the stream that was current before the block current again; closes nothing."),
            (noargs, c"__reduce__", reduce, c"__reduce__($self, /)\n--\n\nStreams cannot be pickled."),
            (positional, c"launch_host_func", launch_host_func, c"launch_host_func($self, fn, /, *args)\n--\n\nRun ``fn(*args)`` on custream's host-function thread once the work queued on\nthe stream before it is done; the work queued after it waits for it. Returns at once\n(unless about 1,000 are already pending on the stream: it then waits, GIL released).\n``fn`` and ``args`` are kept alive until the call ran. An exception in ``fn`` goes to\n``sys.unraisablehook``. ``fn`` must make no CUDA call (custream refuses one). In a\ncapture the call becomes a host node, run at each launch of the graph."),
            (fastcall, c"begin_capture", begin_capture, c"begin_capture($self, /, mode='thread_local')\n--\n\nBegin capturing the work queued on this stream into a CUDA graph; ``mode`` is\n'thread_local', 'global' or 'relaxed' (CUDA's capture modes). End it with\nend_capture(). While it is open, synchronize() and query() on the stream raise\nCudaError instead of invalidating the capture."),
            (noargs, c"end_capture", end_capture, c"end_capture($self, /)\n--\n\nEnd the capture begun on this stream and return the instantiated custream.Graph."),
            (fastcall, c"write_value", write_value, c"write_value($self, /, address, value, *, width=32, flush=False)\n--\n\nWrite ``value`` (a ``width``-bit unsigned int, 32 or 64) to the word at ``address`` once\nthe work queued on the stream before it is done (``cuStreamWriteValue32/64``). ``address``\nis an int GPU address or an array with ``__cuda_array_interface__`` or ``__dlpack__``\n(CuPy, PyTorch, Numba; its first element): device memory, or host memory mapped for the\nGPU, aligned to the width. The building block of a semaphore another stream, device or\nprocess waits on with ``wait_value()``. ``flush=True`` first flushes the remote writes that\nreached the device (``CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES``, where the platform supports it).\nA node of the graph in a capture."),
            (fastcall, c"wait_value", wait_value, c"wait_value($self, /, address, value, *, width=32, op='geq', flush=False)\n--\n\nMake the work queued on the stream after this wait until the word at ``address``\nmeets ``op`` against ``value`` (``cuStreamWaitValue32/64``): 'geq' (``(int)(word - value)\n>= 0``, a greater-or-equal that survives the counter wrapping), 'eq', 'and' (``word & value\n!= 0``) or 'nor' (``~(word | value) != 0``). ``flush=True`` follows the wait with a flush\nof remote writes (``CU_STREAM_WAIT_VALUE_FLUSH``, where the platform supports it). The\nhost does not wait. ``address`` as for ``write_value()``. A node of the graph in a capture.\nWithin one process, order the writer after this wait with an event too: the driver may\nqueue the writer behind it (CUDA's warning; lazy module loading synchronizes the context)."),
            (positional, c"keep_alive", keep_alive, c"keep_alive($self, /, *objs)\n--\n\nHold references to ``objs`` until the work queued on the stream so far is done,\nthen drop them on custream's own thread (never the driver's): a pinned host\nbuffer, an array's storage or a capsule the queued work reads stays alive without a\nsynchronize, and no Python runs in between. Returns at once. In a capture the\nreferences are tied to the graph instead, dropped once the graph and its executables\nare gone. After a fault of the stream's context they are dropped too (the GPU no longer\nruns); those still held when the interpreter exits are left to the process."),
            (fastcall, c"set_access_policy_window", settings::set_access_policy_window, c"set_access_policy_window($self, /, address, nbytes, *, hit_ratio=1.0, hit='persisting', miss='streaming')\n--\n\nSet the stream's L2 access-policy window (``CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW``):\nfor every kernel launched on the stream, by any library, a ``hit_ratio`` share of the\n``nbytes`` bytes from ``address`` gets the ``hit`` property in L2 and the rest ``miss``\n('normal', 'streaming' or 'persisting'). ``address`` as for ``write_value()``: an int or an\narray with ``__cuda_array_interface__`` or ``__dlpack__``. ``nbytes`` is at most the\ndevice's ``CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE`` (a device without a window:\nCudaError). Persisting lines need the context's persisting L2 set aside\n(``cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize)``)."),
            (noargs, c"clear_access_policy_window", settings::clear_access_policy_window, c"clear_access_policy_window($self, /)\n--\n\nRemove the stream's L2 access-policy window (a window of 0 bytes, as CUDA resets it)."),
            (o, c"copy_settings_from", settings::copy_settings_from, c"copy_settings_from($self, other, /)\n--\n\nCopy every setting of ``other`` (a custream.Stream or any ``__cuda_stream__``\nobject) onto this stream: its sync_policy, access-policy window and memory\nsynchronization domain (``cuStreamCopyAttributes``)."),
        ],
        getters: [
            (c"handle", get_handle, c"The CUstream handle as an int (0, 1 and 2 are default-stream tokens)."),
            (c"device", get_device, c"The device ordinal; for default streams, that of the current context. A wrapped\nstream's is asked of the driver once (cuStreamGetDevice where the driver has it, else\nthe stream's context), never by changing the current context."),
            (c"id", get_id, c"The driver's id of the stream (cuStreamGetId): an int unique in the process while\nthe stream lives, the same for every Stream over one handle (CCCL's\n``stream_ref::id()``). A default stream's is that of the current context's."),
            (c"owned", get_owned, c"True if custream created the stream and destroys it on close."),
            (c"owner", get_owner, c"The object kept alive for a borrowed stream, or None."),
            (c"is_default", get_is_default, c"True for the default-stream tokens 0, 1 and 2."),
            (c"non_blocking", get_non_blocking, c"True if the stream does not synchronize with the legacy default stream."),
            (c"priority", get_priority, c"The stream's priority (lower numbers run first)."),
            (c"closed", get_closed, c"True once close() has been called."),
            (c"is_capturing", get_is_capturing, c"True while the stream is capturing a CUDA graph (whoever began the capture)."),
            (c"green_context", get_green_context, c"The custream.GreenContext the stream's work runs in, or None (the whole device).\nAny stream can be asked: one made in a green context by another library answers\ntoo (the driver is asked, and the green context adopted with the stream as owner)."),
            (c"sm_count", get_sm_count, c"How many SMs the stream's work may use: its green context's, else the device's."),
            (c"flags", get_flags, c"The stream's CUSTREAM_FLAG_* bits (custream.h), fixed when the object is made, as\ncustream's FLAG_* ints: FLAG_OWNED (custream made it and destroys it on close),\nFLAG_DEFAULT (a default-stream token: 0, 1 or 2), FLAG_NON_BLOCKING (owned streams),\nFLAG_SHARED (one of the module's default streams, never closed), FLAG_POOLED (made by a\ncustream.StreamPool), FLAG_GREEN (made in a custream.GreenContext)."),
            (c"access_policy_window", settings::get_access_policy_window, c"The stream's L2 access-policy window as a custream.AccessPolicyWindow (address,\nnbytes, hit_ratio, hit, miss), or None when none is set. Set with\nset_access_policy_window(), removed with clear_access_policy_window()."),
        ],
        getsets: [
            (c"sync_policy", settings::get_sync_policy, settings::set_sync_policy, c"How a host thread waits for the stream: 'auto', 'spin', 'yield' or 'blocking'\n(``CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY``), kept by the driver on the stream, so it\nholds for every library's wait on the handle (``cudaStreamSynchronize``: CuPy's, PyTorch's).\ncustream's own waits follow it: 'blocking' sleeps until the work is done, 'spin' polls and\nnever sleeps, 'yield' polls yielding the CPU, 'auto' polls 20 ms and then sleeps. Read and\nset; the default streams refuse a write (ValueError)."),
            (c"mem_sync_domain", settings::get_mem_sync_domain, settings::set_mem_sync_domain, c"The memory-synchronization domain of the stream's kernels, 'default' or 'remote'\n(``CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN``): a fence of a 'remote' kernel does not wait for\nthe memory traffic of 'default' ones (NCCL's kernels use it). Read and set."),
        ],
    )
}
