//! The memory of a Stream object, reached through raw pointers here only: its C layout
//! (`CustreamStream` from pxd/custream.h, bindgen's output kept once in pyo3-custream), and
//! the Stream object CPython passes to the entry points of the Stream type (the type's
//! tables and shims are src/cpython/stream_type.rs's; src/cpython/raw_call.rs has the calling
//! conventions that touch no Stream: argument lists, module functions, the C API's objects).
//!
//! What the rest of the crate gets is safe:
//! - `StreamObject<'a>`, a view of one Stream object, made only from a reference that keeps
//!   the object alive for `'a` (a `&'a Bound`, a `Borrowed<'a, '_, _>`), never `'static`;
//!   its fields are read and written through it alone.
//! - `Fields`, the whole of a new Stream, written once by `alloc`.
//! - The argument views (`Fastcall`, `TupleDict`) and the shims that touch no Stream live in
//!   src/cpython/raw_call.rs, under the same rules.
//! - `method`, `method_fastcall`, `slot`, `dealloc`, `traverse`: what the shims of the Stream
//!   type (src/cpython/stream_type.rs) call to turn CPython's pointers into the views above.
//!
//! The rules that make the `unsafe` blocks here sound. None rests on the GIL: a free-threaded
//! interpreter runs these with other threads attached beside them.
//! 1. A `StreamObject` is made from a live object whose type is `STREAM_TYPE` (checked), or
//!    by a shim from the object CPython called a Stream slot on (CPython's guarantee).
//! 2. The fields `handle`, `flags`, `priority`, `fork_generation` and `protocol` are written
//!    once, in `alloc`, before anybody else sees the object (`protocol` is cleared only by
//!    `dealloc`, when no reference is left). Every other field is only ever accessed
//!    atomically: `state` (the lifecycle's word), `device` (-1, then the device, once),
//!    `stream_id` (NULL, then an int the object holds, once; dropped by `dealloc`),
//!    `reserved` (custream's count of its launches, src/host/queue_depth.rs),
//!    `owner`, `deleter` and `deleter_ctx` (swapped out by the one release, which the state
//!    word elects), `context` and `context_id` (learnt on first use, cleared by the release).
//! 3. The pointers a field holds are kept alive by the state word: a reader of `owner`
//!    holds a use of the stream (src/object/lifecycle.rs), and the release that drops the reference
//!    waits for every use in flight.
//! 4. Every shim runs attached to the interpreter: CPython calls slots and methods so, and
//!    the C API's contract (custream.h) requires it.

use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};

use crate::cpython::boundary::no_unwind;
use crate::cpython::raw_call::Fastcall;
use crate::driver::Context;

// The C layout of pxd/custream.h: bindgen's output, kept once, as the pyo3-custream crate's
// `ffi` module (tests/layout.rs compares it byte for byte with a fresh bindgen run).
pub use pyo3_custream::ffi::*;

/// Bytes that a build with the `abi-growth-test` feature appends to the Stream object and to
/// the C-API table, standing for a later custream whose object and table grew: the test of
/// the growth rule (tests/test_abi_growth.py) runs consumers built against today's header on
/// it. 0 in every build that ships.
pub const GROWTH: usize = if cfg!(feature = "abi-growth-test") { 64 } else { 0 };

/// The Stream type's `tp_basicsize`, and the table's `stream_size`.
pub const STREAM_SIZE: usize = size_of::<CustreamStream>() + GROWTH;

/// The Stream type object, made once when the module is initialized and never freed.
static STREAM_TYPE: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(null_mut());

/// Remember the Stream type (src/stream/slots.rs made it); it lives for the process.
pub fn set_stream_type(tp: Bound<'_, PyType>) {
    STREAM_TYPE.store(tp.into_ptr().cast(), Ordering::Release);
}

/// The Stream type, once made.
pub fn stream_type<'py>(py: Python<'py>) -> Option<Bound<'py, PyType>> {
    let tp = STREAM_TYPE.load(Ordering::Acquire);
    // SAFETY: the type object set above, which is never freed (rule 1's type).
    (!tp.is_null()).then(|| unsafe { Bound::from_borrowed_ptr(py, tp.cast()).cast_into_unchecked() })
}

/// The Stream type's pointer, for the C API's table.
pub fn stream_type_ptr() -> *mut ffi::PyTypeObject {
    STREAM_TYPE.load(Ordering::Acquire)
}

/// Whether `obj` is a custream.Stream (the type is final, so this is an identity test).
#[inline]
pub fn is_stream(obj: &Bound<'_, PyAny>) -> bool {
    let tp = STREAM_TYPE.load(Ordering::Acquire);
    !tp.is_null() && obj.get_type_ptr() == tp
}

/// A field of the object `$s` (a `StreamObject`) that rule 2 says is written once, in
/// `alloc`, before anybody else sees the object: `handle`, `flags`, `priority`,
/// `fork_generation`. Read plainly.
macro_rules! fixed_field {
    ($s:expr, $field:ident) => {{
        let raw = $s.raw();
        // SAFETY: alive for 'a; every field named at this macro's uses is one rule 2 says is
        // written once, in `alloc`, before anybody else saw the object.
        unsafe { (*raw).$field }
    }};
}

/// The field `$field` of the object `$s` (a `StreamObject`) as a `&'a $atomic`: one that rule 2
/// says is only ever accessed atomically (`state`, `device`, `reserved`, `stream_id`,
/// `owner`, `context`, `context_id`, `deleter_ctx`). `from_ptr` takes a pointer to the
/// atomic's value type, so the compiler checks the field's type.
macro_rules! atomic_field {
    ($s:expr, $atomic:ident, $field:ident) => {{
        let raw = $s.raw();
        // SAFETY: alive for 'a; every field named at this macro's uses is one rule 2 says is
        // only accessed atomically, and of the atomic's value type (checked by `from_ptr`).
        unsafe { $atomic::from_ptr(&raw mut (*raw).$field) }
    }};
}

/// A view of one Stream object, valid for `'a`, during which a reference keeps it alive.
#[derive(Clone, Copy)]
pub struct StreamObject<'a> {
    raw: NonNull<CustreamStream>,
    alive: PhantomData<&'a CustreamStream>,
}

impl<'a> StreamObject<'a> {
    /// The view of `obj` if it is a Stream.
    #[inline]
    pub fn cast(obj: &'a Bound<'_, PyAny>) -> Option<Self> {
        // SAFETY: `obj` is alive for 'a and of our type (rule 1).
        is_stream(obj).then(|| unsafe { Self::from_ptr(obj.as_ptr()) })
    }

    /// The view of `obj`, which must be a Stream: a TypeError naming `what` otherwise.
    pub fn of(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Self> {
        Self::cast(obj).ok_or_else(|| {
            let got = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            PyTypeError::new_err(format!("{what} expected a custream.Stream, got {got}"))
        })
    }

    /// # Safety
    /// `obj` is a live Stream for 'a.
    #[inline]
    unsafe fn from_ptr(obj: *mut ffi::PyObject) -> Self {
        StreamObject {
            // SAFETY: the caller's contract: a live object is not null.
            raw: unsafe { NonNull::new_unchecked(obj.cast()) },
            alive: PhantomData,
        }
    }

    #[inline]
    fn raw(self) -> *mut CustreamStream {
        self.raw.as_ptr()
    }

    /// A new reference to the object.
    pub fn object<'py>(self, py: Python<'py>) -> Bound<'py, PyAny> {
        // SAFETY: alive for 'a (rule 1): a borrowed reference made into a new one.
        unsafe { Bound::from_borrowed_ptr(py, self.raw().cast()) }
    }

    /// The handle as an int (0, 1 and 2 are the default-stream tokens).
    #[inline]
    pub fn handle_value(self) -> u64 {
        fixed_field!(self, handle) as usize as u64
    }

    #[inline]
    pub fn flags(self) -> u32 {
        fixed_field!(self, flags)
    }

    pub fn priority_field(self) -> i32 {
        fixed_field!(self, priority)
    }

    #[inline]
    pub fn fork_generation(self) -> u32 {
        fixed_field!(self, fork_generation)
    }

    /// The lifecycle's state word (src/object/lifecycle.rs).
    #[inline]
    pub fn state(self) -> &'a AtomicU32 {
        atomic_field!(self, AtomicU32, state)
    }

    /// The device ordinal, or CUSTREAM_DEVICE_UNKNOWN until a borrowed stream's is learnt.
    #[inline]
    pub fn device_cell(self) -> &'a AtomicI32 {
        atomic_field!(self, AtomicI32, device)
    }

    /// custream's count of its launches on the stream since it last looked at the queue's
    /// depth (src/host/queue_depth.rs).
    #[inline]
    pub fn launches(self) -> &'a AtomicU32 {
        atomic_field!(self, AtomicU32, reserved)
    }

    fn id_cell(self) -> &'a AtomicPtr<ffi::PyObject> {
        atomic_field!(self, AtomicPtr, stream_id)
    }

    /// The driver's id of the stream as an int, once kept (`keep_id`), as a new reference.
    #[inline]
    pub fn known_id<'py>(self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        let p = self.id_cell().load(Ordering::Acquire);
        // SAFETY: null, or an int the object holds a reference to until `dealloc` (rule 2),
        // made into a new reference while the object is alive ('a).
        (!p.is_null()).then(|| unsafe { Bound::from_borrowed_ptr(py, p) })
    }

    /// Keep `id` as the stream's id (threads learning it at once: the first one stored) and
    /// return the one kept.
    pub fn keep_id<'py>(self, id: Bound<'py, PyAny>) -> Bound<'py, PyAny> {
        let py = id.py();
        let p = id.into_ptr();
        let kept = match self
            .id_cell()
            .compare_exchange(null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => p,
            Err(kept) => {
                // SAFETY: `p` is our own reference, not stored: given back here.
                drop(unsafe { Bound::from_owned_ptr(py, p) });
                kept
            }
        };
        // SAFETY: the reference just stored, or the one stored first: as in `known_id`, the
        // object holds it until `dealloc` (rule 2) and is alive ('a).
        unsafe { Bound::from_borrowed_ptr(py, kept) }
    }

    fn owner_cell(self) -> &'a AtomicPtr<ffi::PyObject> {
        atomic_field!(self, AtomicPtr, owner)
    }

    /// The object a borrowed stream keeps alive, if any, as a new reference. The caller holds
    /// a use of the stream, or is its one release (the `_open` proof): the object's own
    /// reference is dropped only by `take_owner`, in the release, after every use (rule 3).
    pub fn owner<'py>(self, py: Python<'py>, _open: &impl KeepsOpen) -> Option<Bound<'py, PyAny>> {
        let p = self.owner_cell().load(Ordering::Acquire);
        // SAFETY: the object holds this strong reference until `take_owner`, which cannot run
        // meanwhile (rule 3); made into a new reference before the use ends.
        (!p.is_null()).then(|| unsafe { Bound::from_borrowed_ptr(py, p) })
    }

    /// Take the object's reference to its owner: the caller (the one release) now holds it.
    pub fn take_owner(self, _py: Python<'_>) -> Option<Owned> {
        let p = self.owner_cell().swap(null_mut(), Ordering::AcqRel);
        NonNull::new(p).map(Owned)
    }

    /// The (0, handle) tuple `__cuda_stream__()` returns; its item 1 is `handle`'s int.
    #[inline]
    pub fn protocol<'py>(self, py: Python<'py>) -> Borrowed<'a, 'py, PyTuple> {
        // SAFETY: set to a tuple in `alloc` and held until `dealloc` (rule 2); alive for 'a.
        unsafe { Borrowed::from_ptr(py, (*self.raw()).protocol).cast_unchecked() }
    }

    fn context_cells(self) -> (&'a AtomicPtr<c_void>, &'a AtomicU64) {
        (
            atomic_field!(self, AtomicPtr, context),
            atomic_field!(self, AtomicU64, context_id),
        )
    }

    /// The context the stream lives in and its id, once known.
    #[inline]
    pub fn known_context(self) -> (Option<Context>, u64) {
        let (context, id) = self.context_cells();
        // The id is stored before the context (`set_context`), so a context seen here comes
        // with its id. Two threads learning it at once store what the driver told each of
        // them about the same stream: the same pair, unless its context was reset in
        // between, and then either pair fails the next check, which is what a reset must do.
        let raw = context.load(Ordering::Acquire);
        let id = id.load(Ordering::Relaxed);
        // SAFETY: null or a context the driver handed out (written by `set_context` alone).
        (unsafe { Context::from_raw(raw) }, id)
    }

    /// Learn (or forget, with None) the context.
    pub fn set_context(self, context: Option<Context>, id: u64) {
        let (cell, id_cell) = self.context_cells();
        id_cell.store(id, Ordering::Relaxed);
        cell.store(context.map_or(null_mut(), Context::as_raw), Ordering::Release);
    }

    fn deleter_cells(self) -> (&'a AtomicPtr<c_void>, &'a AtomicPtr<c_void>) {
        // SAFETY: alive for 'a; the field is only accessed atomically (rule 2).
        // `custream_deleter_t` is an Option of a function pointer: one pointer, null for
        // None, so the field is read and written as a pointer.
        let deleter = unsafe { AtomicPtr::from_ptr((&raw mut (*self.raw()).deleter).cast::<*mut c_void>()) };
        (deleter, atomic_field!(self, AtomicPtr, deleter_ctx))
    }

    pub fn has_deleter(self) -> bool {
        !self.deleter_cells().0.load(Ordering::Acquire).is_null()
    }

    /// Take the C owner's release, to be called once. The one release takes it, and it alone
    /// writes these fields after `alloc`: a load and a store do (readers only read), and a
    /// stream without a deleter (the common wrap) writes nothing.
    pub fn take_deleter(self, _py: Python<'_>) -> Option<Deleter> {
        let (f, ctx) = self.deleter_cells();
        let raw = f.load(Ordering::Acquire);
        if raw.is_null() {
            return None;
        }
        f.store(null_mut(), Ordering::Release);
        // SAFETY: the field held a `custream_deleter_t` that is not None: a function pointer
        // of that signature, which `alloc` stored.
        let f =
            unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void, custream_handle_t)>(raw) };
        Some(Deleter {
            f,
            ctx: ctx.swap(null_mut(), Ordering::AcqRel),
            handle: self.handle_value() as usize as custream_handle_t,
        })
    }
}

/// Proof that a Stream's release cannot run meanwhile (rule 3): a use in flight
/// (`lifecycle::InUse`), or the one release itself.
///
/// # Safety
/// A value of the type exists only while the object's release has not begun, or inside it.
pub unsafe trait KeepsOpen {}

/// A strong reference taken out of a Stream object (its owner), to give back in
/// src/stream/owner_release.rs's bounded way.
pub struct Owned(NonNull<ffi::PyObject>);

impl Owned {
    /// The reference, as a Bound that drops it.
    pub fn into_bound(self, py: Python<'_>) -> Bound<'_, PyAny> {
        // SAFETY: a strong reference the Stream held, now ours (`take_owner`).
        unsafe { Bound::from_owned_ptr(py, self.0.as_ptr()) }
    }
}

/// A C owner's release of a borrowed stream, taken out of the object (custream.h's
/// `Custream_FromHandleWithDeleter`).
pub struct Deleter {
    f: unsafe extern "C" fn(*mut c_void, custream_handle_t),
    ctx: *mut c_void,
    handle: custream_handle_t,
}

impl Deleter {
    /// Call it, once, attached to the interpreter.
    pub fn call(self, _py: Python<'_>) {
        // SAFETY: custream.h's contract for the deleter: called exactly once, attached, with
        // the context pointer and the handle it was given with. `take_deleter` took it out of
        // the object, so this is the only call.
        unsafe { (self.f)(self.ctx, self.handle) }
    }
}

/// Everything a new Stream object holds.
pub struct Fields<'py> {
    pub handle: u64,
    pub protocol: Bound<'py, PyTuple>,
    pub flags: u32,
    pub device: i32,
    pub priority: i32,
    pub fork_generation: u32,
    pub owner: Option<Bound<'py, PyAny>>,
    pub deleter: custream_deleter_t,
    pub deleter_ctx: *mut c_void,
    pub context: Option<Context>,
    pub context_id: u64,
}

/// Make a Stream object holding `fields`. On failure the fields are dropped, and the C
/// deleter is not called: the handle stays the caller's.
pub fn alloc<'py>(py: Python<'py>, fields: Fields<'py>) -> PyResult<Bound<'py, PyAny>> {
    let tp = STREAM_TYPE.load(Ordering::Acquire);
    if tp.is_null() {
        return Err(PyValueError::new_err("custream is not initialized"));
    }
    // SAFETY: tp is our type; PyType_GenericAlloc returns a new reference to a zeroed object
    // that the GC tracks, or null with an exception set. The fields are written while the
    // object is fresh, of our type, and seen by nobody else yet (rule 2).
    unsafe {
        let obj = Bound::from_owned_ptr_or_err(py, ffi::PyType_GenericAlloc(tp, 0))?;
        let s = obj.as_ptr().cast::<CustreamStream>();
        (*s).handle = fields.handle as usize as custream_handle_t;
        (*s).protocol = fields.protocol.into_ptr();
        (*s).flags = fields.flags;
        (*s).device = fields.device;
        (*s).priority = fields.priority;
        (*s).fork_generation = fields.fork_generation;
        (*s).owner = fields.owner.map_or(null_mut(), Bound::into_ptr);
        (*s).deleter = fields.deleter;
        (*s).deleter_ctx = fields.deleter_ctx;
        (*s).context = fields.context.map_or(null_mut(), Context::as_raw);
        (*s).context_id = fields.context_id;
        Ok(obj)
    }
}

// ---- the shims ----------------------------------------------------------------------------
// The functions below are what the shims of src/cpython/stream_type.rs call: each turns CPython's pointers into
// the views above. The GIL is held and the pointers are CPython's (rule 4).

/// # Safety
/// `obj` is the live Stream a method was called on (or an attribute set on), `arg` NULL or
/// a live argument (the new value, NULL when the attribute is deleted); the GIL is held.
#[inline(always)]
pub unsafe fn method<R>(
    obj: *mut ffi::PyObject,
    arg: *mut ffi::PyObject,
    f: impl for<'a> FnOnce(StreamObject<'a>, Python<'a>, Option<Borrowed<'a, 'a, PyAny>>) -> R,
) -> R {
    // SAFETY: the caller's contract: the thread is attached, `obj` is a live Stream and `arg` NULL
    // or alive, all for the call.
    let (py, s, arg) = unsafe {
        let py = Python::assume_attached();
        (py, StreamObject::from_ptr(obj), Borrowed::from_ptr_or_opt(py, arg))
    };
    f(s, py, arg)
}

/// # Safety
/// `obj` is the live Stream a METH_FASTCALL method was called on, the rest what CPython
/// passed with it; the thread is attached.
#[inline(always)]
pub unsafe fn method_fastcall<R>(
    obj: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
    f: impl for<'a> FnOnce(StreamObject<'a>, Python<'a>, Fastcall<'a, 'a>) -> R,
) -> R {
    // SAFETY: the caller's contract: the thread is attached, `obj` is a live Stream and the rest
    // what CPython passes to a METH_FASTCALL method, all for the call.
    let (py, s, args) = unsafe {
        let py = Python::assume_attached();
        (py, StreamObject::from_ptr(obj), Fastcall::new(py, args, nargs, kwnames))
    };
    f(s, py, args)
}

/// # Safety
/// `obj` is a live Stream a slot was called on (tp_hash, tp_clear); the thread is attached.
#[inline(always)]
pub unsafe fn slot<R>(obj: *mut ffi::PyObject, f: impl for<'a> FnOnce(StreamObject<'a>, Python<'a>) -> R) -> R {
    // SAFETY: the caller's contract: the thread is attached and `obj` is a live Stream.
    unsafe { f(StreamObject::from_ptr(obj), Python::assume_attached()) }
}

/// tp_dealloc: `release` what the stream holds, then free it.
///
/// # Safety
/// `obj` is a Stream whose last reference is gone; the thread is attached.
pub unsafe fn dealloc(obj: *mut ffi::PyObject, release: impl FnOnce(StreamObject<'_>, Python<'_>)) {
    // SAFETY: the caller's contract; every step below is CPython's own teardown order, and
    // nothing reads the object after PyObject_GC_Del.
    unsafe {
        ffi::PyObject_GC_UnTrack(obj.cast());
        let s = StreamObject::from_ptr(obj);
        if !(*s.raw()).weakreflist.is_null() {
            ffi::PyObject_ClearWeakRefs(obj);
        }
        let py = Python::assume_attached();
        no_unwind(|| release(s, py));
        let protocol = std::mem::replace(&mut (*s.raw()).protocol, null_mut());
        if !protocol.is_null() {
            ffi::Py_DECREF(protocol);
        }
        let id = s.id_cell().swap(null_mut(), Ordering::AcqRel);
        if !id.is_null() {
            ffi::Py_DECREF(id);
        }
        let tp = ffi::Py_TYPE(obj);
        ffi::PyObject_GC_Del(obj.cast());
        ffi::Py_DECREF(tp.cast());
    }
}

/// tp_traverse: the references a Stream holds.
///
/// # Safety
/// `obj` is a live Stream; `visit` and `arg` are what CPython passed.
pub unsafe fn traverse(obj: *mut ffi::PyObject, visit: ffi::visitproc, arg: *mut c_void) -> c_int {
    let s = obj.cast::<CustreamStream>();
    // SAFETY: the caller's contract; the owner is read atomically, as everywhere (rule 2).
    let held = unsafe {
        [
            AtomicPtr::from_ptr(&raw mut (*s).owner).load(Ordering::Acquire),
            (*s).protocol,
            ffi::Py_TYPE(obj).cast(),
        ]
    };
    for p in held.into_iter().filter(|p| !p.is_null()) {
        // SAFETY: a live reference, visited as CPython's GC asks.
        let r = unsafe { visit(p, arg) };
        if r != 0 {
            return r;
        }
    }
    0
}
