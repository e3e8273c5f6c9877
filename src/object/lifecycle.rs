//! The one lifecycle of every custream object that holds a driver object (Stream, Event,
//! Graph, GreenContext): how a use holds it open (`InUse`), and how it is closed and released
//! exactly once (`close`, `close_quietly`, `release_at_dealloc`); `Made`, a driver object
//! made in a `Home` (src/object/home_context.rs) under it.
//!
//! The state word (src/object/state_word.rs) decides who releases: exactly once, never while a use
//! is in flight. Nothing outside these two files writes it.

use std::sync::atomic::AtomicU32;
use std::sync::{Mutex, PoisonError};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::driver::gate;
use crate::driver::{self, Context, DriverError};
use crate::object::home_context::Home;
use crate::object::state_word::{Release, Word};

/// An object with this lifecycle: its state word, the fork generation it was made in, and
/// what releasing it means.
pub trait Managed {
    /// The Python type's name, for errors.
    const KIND: &'static str;
    fn state(&self) -> &AtomicU32;
    fn fork_generation(&self) -> u32;
    /// Give back what the object holds. Runs once, with the GIL held.
    fn release(&self, py: Python<'_>) -> driver::Result<()>;
}

/// Whether this process may call the driver (or a C deleter) for an object made in
/// `generation`: not in a forked child, not during finalization, where its handles belong
/// to a dead parent or to the process's exit.
pub fn may_release(generation: u32) -> bool {
    generation == gate::fork_generation() && !gate::is_finalizing()
}

pub fn is_closed<T: Managed>(obj: &T) -> bool {
    Word(obj.state()).is_closed()
}

/// The error for a use of a closed object.
pub fn closed_error(kind: &str, what: &str) -> PyErr {
    PyValueError::new_err(format!("{what} on a closed {kind}"))
}

/// Fails with the closed-object error naming `what`, without holding the object open: for a
/// use that keeps the GIL from start to end, during which no close can begin.
pub fn ensure_usable<T: Managed>(obj: &T, what: &str) -> PyResult<()> {
    if obj.fork_generation() != gate::fork_generation() {
        return Err(DriverError::Forked.into());
    }
    if is_closed(obj) {
        return Err(closed_error(T::KIND, what));
    }
    Ok(())
}

/// A use in flight: the object stays open until this is dropped; a `close()` meanwhile
/// takes effect then, and its release runs here.
pub struct InUse<'a, T: Managed> {
    obj: &'a T,
    py: Python<'a>,
}

/// Begin a use of `obj`: fails after a fork or once closed. `what` names it in errors.
pub fn enter<'a, T: Managed>(obj: &'a T, py: Python<'a>, what: &str) -> PyResult<InUse<'a, T>> {
    if obj.fork_generation() != gate::fork_generation() {
        return Err(DriverError::Forked.into());
    }
    if !Word(obj.state()).enter() {
        return Err(closed_error(T::KIND, what));
    }
    Ok(InUse { obj, py })
}

// SAFETY: an InUse is made only by a successful `Word::enter` and ends the use when dropped;
// the release waits for every use to end (src/object/state_word.rs).
unsafe impl<T: Managed> crate::cpython::stream_object::KeepsOpen for InUse<'_, T> {}

/// Hold `obj` open without a driver call (to read what its release drops): also in a forked
/// child, where no driver call may follow. None once closed.
pub fn hold<'a, T: Managed>(obj: &'a T, py: Python<'a>) -> Option<InUse<'a, T>> {
    // `then`, not `then_some`: an InUse made and dropped on refusal would leave a use never begun.
    Word(obj.state()).enter().then(|| InUse { obj, py })
}

impl<T: Managed> InUse<'_, T> {
    /// Keep the use open past this guard, until `end_kept_use`: for what lives inside the
    /// object (a stream made in a green context), which must not see it released first.
    pub fn keep(self) {
        std::mem::forget(self);
    }
}

/// End a use that `InUse::keep` kept open; a `close()` meanwhile is carried out now if this
/// was the last use.
pub fn end_kept_use<T: Managed>(obj: &T, py: Python<'_>) {
    if Word(obj.state()).leave() == Release::Now {
        // The close() that came first left the release to the last use; its errors have no
        // caller to go to.
        let _ = obj.release(py);
    }
}

impl<T: Managed> Drop for InUse<'_, T> {
    fn drop(&mut self) {
        if Word(self.obj.state()).leave() == Release::Now {
            // The close() that raced this use left the release to us; its errors have no
            // caller to go to.
            let _ = self.obj.release(self.py);
        }
    }
}

/// close(): idempotent; the first call releases (now, or when the uses in flight end). An
/// object whose context died (a sticky fault, a reset) went with it: its close succeeds, so
/// that a `finally: close()` never hides the error that killed the context.
pub fn close<T: Managed>(obj: &T, py: Python<'_>) -> PyResult<()> {
    match Word(obj.state()).close() {
        Release::Now => match obj.release(py) {
            Err(e) if e.context_is_dead() => Ok(()),
            released => Ok(released?),
        },
        Release::NotYours => Ok(()),
    }
}

/// close() without raising: for tp_clear (deallocation uses `release_at_dealloc`).
pub fn close_quietly<T: Managed>(obj: &T, py: Python<'_>) {
    if Word(obj.state()).close() == Release::Now {
        let _ = obj.release(py);
    }
}

/// The release at deallocation (see `Word::close_unshared`).
pub fn release_at_dealloc<T: Managed>(obj: &T, py: Python<'_>) {
    if Word(obj.state()).close_unshared() == Release::Now {
        let _ = obj.release(py);
    }
}

/// A driver object custream made in a `Home` and destroys there (an Event's event, a Graph's
/// executable graph): an owning handle, its `Copy` view for calls, how it is destroyed, and
/// what its Python class is called.
pub trait DriverObject: Send + 'static {
    /// The Python type's name, for errors.
    const KIND: &'static str;
    type View: Copy;
    fn view(&self) -> Self::View;
    fn destroy(self, context: Context) -> driver::Result<()>;
    fn view_u64(view: Self::View) -> u64;
}

/// Such an object under this lifecycle: made in this process, destroyed once, in its context,
/// never after a fork or during finalization. The Python class holds one.
pub struct Made<H: DriverObject> {
    view: H::View,
    /// Taken by the one release.
    owned: Mutex<Option<H>>,
    home: Home,
    state: AtomicU32,
    fork_generation: u32,
}

impl<H: DriverObject> Made<H> {
    pub fn new(home: Home, owned: H) -> Self {
        Made {
            view: owned.view(),
            owned: Mutex::new(Some(owned)),
            home,
            state: AtomicU32::new(0),
            fork_generation: gate::fork_generation(),
        }
    }

    pub fn home(&self) -> &Home {
        &self.home
    }

    /// Begin a use: the handle, held open until the guard is dropped, its context checked.
    pub fn enter<'a>(&'a self, py: Python<'a>, what: &str) -> PyResult<(InUse<'a, Self>, H::View)> {
        let in_use = enter(self, py, what)?;
        driver::ensure_same_context(self.home.context, self.home.context_id)?;
        Ok((in_use, self.view))
    }

    /// The handle as an int; raises once closed.
    pub fn handle(&self) -> PyResult<u64> {
        if self.is_closed() {
            return Err(closed_error(H::KIND, "handle"));
        }
        Ok(H::view_u64(self.view))
    }

    /// The handle's value even when closed, for repr.
    pub fn handle_value(&self) -> u64 {
        H::view_u64(self.view)
    }

    pub fn is_closed(&self) -> bool {
        is_closed(self)
    }

    pub fn close(&self, py: Python<'_>) -> PyResult<()> {
        close(self, py)
    }
}

impl<H: DriverObject> Managed for Made<H> {
    const KIND: &'static str = H::KIND;

    fn state(&self) -> &AtomicU32 {
        &self.state
    }

    fn fork_generation(&self) -> u32 {
        self.fork_generation
    }

    fn release(&self, py: Python<'_>) -> driver::Result<()> {
        let owned = self.owned.lock().unwrap_or_else(PoisonError::into_inner).take();
        match owned {
            Some(owned) if may_release(self.fork_generation) => self.home.release(py, move |ctx| owned.destroy(ctx)),
            // Made in a parent process, or released during finalization: never destroyed
            // (an owning handle has no Drop: dropping it leaves the driver object as it is).
            Some(_) | None => Ok(()),
        }
    }
}

impl<H: DriverObject> Drop for Made<H> {
    fn drop(&mut self) {
        // A pyclass is dropped by its tp_dealloc, with the GIL held; while the interpreter
        // finalizes pyo3 will not attach, and nothing may be released then anyway.
        let _ = Python::try_attach(|py| release_at_dealloc(&*self, py));
    }
}
