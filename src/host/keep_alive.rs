//! Lifetimes in stream order: `s.keep_alive(*objs)` holds references until the work queued on
//! the stream so far is done, then drops them on custream's thread; the C face's
//! `Custream_ReleaseAfter(s, fn, ctx)` calls `fn(ctx)` there instead (pyo3-custream's
//! `Stream::release_after` boxes a Rust closure into it).
//!
//! No synchronization and no Python in between: one driver callback per call, a boxed
//! closure handed to `driver::call_after`, which runs on the driver's thread when the stream
//! gets there and only posts the release to custream's host thread (src/host/thread.rs), so
//! the driver's thread never waits for the GIL, and a thousand pending releases cost a
//! thousand small boxes, no thread each. The callback is `cuStreamAddCallback`'s rather than
//! `cuLaunchHostFunc`'s: the driver still calls it after a fault of the context (with the
//! fault's status), when the GPU no longer runs and what was kept may go; a host function of
//! cuLaunchHostFunc is then never called and would hold it for the life of the process. A
//! driver without cuStreamAddCallback gets cuLaunchHostFunc.
//!
//! In a capture (custream's or joined) nothing is queued: the release is owned by a CUDA user
//! object (`driver::user_object_owning`) that the graph takes when the capture ends
//! (src/driver/capture_guard.rs), as a captured host function's call is, and runs when the
//! graph and its executables are gone (a capture no graph comes of releases it at once). In a
//! capture custream does not know, the user object is never handed over and the references
//! are kept for the life of the process.
//!
//! What is released where: Python references on custream's thread, attached; once the
//! interpreter finalizes, or in a forked child, they are left to the process (never touched
//! without the interpreter). A C release function is called on custream's thread in every case.

use std::ffi::c_void;

use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyTupleMethods};

use crate::cpython::stream_object::StreamObject;
use crate::driver::capture_guard;
use crate::driver::gate;
use crate::driver::{self, CaptureStatus, StreamHandle};
use crate::host::queue_depth::{self, Gil};
use crate::host::thread::{self, After};
use crate::object::lifecycle;

/// What a release lets go of.
enum Kept {
    /// `keep_alive`'s references, from fork generation `generation`.
    Objects { objs: Py<PyTuple>, generation: u32 },
    /// `Custream_ReleaseAfter`'s function and context.
    C {
        f: unsafe extern "C" fn(*mut c_void),
        ctx: CContext,
    },
}

/// A C caller's context pointer, opaque to us.
struct CContext(*mut c_void);
// SAFETY: never dereferenced here; custream.h's contract for Custream_ReleaseAfter makes the
// caller promise that `fn(ctx)` may run on another thread (custream's), which is all this
// lets the pointer do.
unsafe impl Send for CContext {}

impl Kept {
    /// Let go, on custream's thread: `py` while Python may still be entered.
    fn release(self, py: Option<Python<'_>>) -> After {
        match self {
            Kept::Objects { objs, generation } => match py.filter(|_| lifecycle::may_release(generation)) {
                Some(_) => drop(objs),
                // The interpreter is gone, or this is a forked child: never touched.
                None => std::mem::forget(objs),
            },
            // SAFETY: the C caller's contract (custream.h): `f(ctx)` once, on any thread.
            Kept::C { f, ctx } => unsafe { f(ctx.0) },
        }
        After::Nothing
    }
}

/// A release, made once: handed to custream's thread when the driver calls back, or when it
/// is dropped unmade (an error on the way: nothing of the stream's reads what it keeps), so
/// that a C release function is called once in every case and Python references are dropped
/// only on custream's thread.
struct Release(Option<Kept>);

/// The graph's last reference is gone: dropped (handed to custream's thread).
impl driver::UserObjectData for Release {
    fn release(self: Box<Self>) {}
}

impl Drop for Release {
    /// Hand to custream's thread; from any thread, the driver's included (a post never waits
    /// for the GIL).
    fn drop(&mut self) {
        if let Some(kept) = self.0.take() {
            thread::post(Box::new(move |py| kept.release(py)));
        }
    }
}

/// Queue the release of `kept` behind the work queued so far on `stream`, or tie it to the
/// graph its capture ends in. `what` names the call in errors. A release the driver refused
/// is dropped unmade: handed to custream's thread at once.
fn queue(py: Python<'_>, stream: StreamObject<'_>, kept: Kept, what: &str) -> PyResult<()> {
    let kept = Release(Some(kept));
    stream.use_handle_py(py, what, |h| {
        let capturing = driver::stream_capture_status(h)? != CaptureStatus::None;
        if capturing {
            return Ok(tie_to_graph(h, kept)?);
        }
        queue_depth::run(
            py,
            stream,
            h,
            Gil::Brief,
            |_| true,
            move || driver::call_after(h, Box::new(move || drop(kept))),
        )
    })
}

/// In a capture: a user object owns the release, handed to the graph at the capture's end.
fn tie_to_graph(h: StreamHandle, kept: Release) -> driver::Result<()> {
    // On an error the release comes back, and is dropped unmade.
    let (owner, _) = driver::user_object_owning(Box::new(kept)).map_err(|(e, _)| e)?;
    capture_guard::keep_until_captured(h, owner);
    Ok(())
}

/// `s.keep_alive(*objs)`.
pub fn keep_alive(py: Python<'_>, stream: StreamObject<'_>, objs: Bound<'_, PyTuple>) -> PyResult<()> {
    if objs.is_empty() {
        // Nothing to hold; a closed stream still says so.
        return stream.use_handle(py, "keep_alive()", |_| Ok(()));
    }
    let kept = Kept::Objects {
        objs: objs.unbind(),
        generation: gate::fork_generation(),
    };
    queue(py, stream, kept, "keep_alive()")
}

/// The C face: `f(ctx)` on custream's thread after the work queued so far on `stream`; on an
/// error (the exception raised), as soon as custream's thread gets to it: called once in
/// every case.
pub fn release_after_c(
    py: Python<'_>,
    stream: StreamObject<'_>,
    f: unsafe extern "C" fn(*mut c_void),
    ctx: *mut c_void,
) -> PyResult<()> {
    let kept = Kept::C { f, ctx: CContext(ctx) };
    queue(py, stream, kept, "Custream_ReleaseAfter()")
}

/// `f(ctx)` on custream's thread as soon as it gets to it: the C face's error before a stream
/// was found (`f` is called once in every case).
pub fn release_c_now(f: unsafe extern "C" fn(*mut c_void), ctx: *mut c_void) {
    drop(Release(Some(Kept::C { f, ctx: CContext(ctx) })));
}
