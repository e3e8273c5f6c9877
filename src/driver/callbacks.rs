//! Rust code the driver calls on its threads, behind a safe API: `call_after` runs a closure
//! once the work queued so far on a stream is done; `user_object_owning` makes a CUDA user
//! object that owns a box, let go (`UserObjectData::release`) once the last reference to the
//! object is gone. The trampolines, and the boxes the driver holds for them, are here, so that
//! a caller (src/host/keep_alive.rs, src/host/functions.rs) hands them over with no `unsafe`
//! of its own.
//!
//! What runs there runs once, on a driver thread, marked as a host function
//! (`gate::HostFunctionScope`): CUDA forbids CUDA calls there, so every custream call in it
//! refuses. A panic in it stays there (it is caught and dropped): none crosses into the
//! driver.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::{Mutex, PoisonError};

use super::*;

/// A closure the driver calls once, on one of its threads.
pub type Once = Box<dyn FnOnce() + Send>;

/// Run `f` as a host function.
fn run(f: impl FnOnce()) {
    let _inside = gate::HostFunctionScope::enter();
    let _ = catch_unwind(AssertUnwindSafe(f));
}

/// The callback of cuStreamAddCallback (after the work before it, or after a fault of the
/// context, with its status): takes back and runs the `Once` that `call_after` boxed.
///
/// # Safety
/// `user` is the box of a `Once` (a thin pointer) that nothing else takes back.
unsafe extern "C" fn run_boxed(_stream: CUstream, _status: Status, user: *mut c_void) {
    // SAFETY: the caller's contract: `call_after` made the box, which the driver calls this
    // with once, and which is taken back nowhere else once the call succeeded.
    run(*unsafe { Box::from_raw(user.cast::<Once>()) });
}

/// Where cuLaunchHostFunc's host function finds its closure. A host function may be run more
/// than once: queued on a stream that another thread began to capture after `call_after`
/// asked, it becomes a host node, run at each launch of the graph, for as long as the graph
/// lives. So the slot is never freed (a few words, on a driver without cuStreamAddCallback
/// only), and its closure is taken out at the first run; a later run finds none.
type Slot = Mutex<Option<Once>>;

/// The host function of cuLaunchHostFunc, for a driver without cuStreamAddCallback.
///
/// # Safety
/// `user` points to a `Slot` that lives for the process.
unsafe extern "C" fn run_slot(user: *mut c_void) {
    // SAFETY: the caller's contract: `call_after` leaked the slot.
    let slot = unsafe { &*user.cast::<Slot>() };
    let f = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(f) = f {
        run(f);
    }
}

/// Run `f` once on a driver thread after the work queued so far on `h` is done: with
/// cuStreamAddCallback where the driver has it (called after a fault of the context too, when
/// the GPU no longer runs; a capture refuses it), else with cuLaunchHostFunc (whose function a
/// faulted context never calls, and which a capture makes a host node of: run at the graph's
/// first launch). The caller asks first whether `h` captures. On an error the driver will not
/// call it, and `f` is dropped here, uncalled.
pub fn call_after(h: StreamHandle, f: Once) -> Result<()> {
    init()?;
    let Some(t) = libcuda::callbacks() else {
        let slot: &'static Slot = Box::leak(Box::new(Mutex::new(Some(f))));
        let user = std::ptr::from_ref(slot).cast_mut().cast::<c_void>();
        // SAFETY: `run_slot` may be called any number of times (see `Slot`), from any thread,
        // with a slot that lives for the process; it makes no CUDA call of its own, and
        // custream's refuse in it (`run`).
        let launched = unsafe { launch_host_func(h, run_slot, user) };
        if launched.is_err() {
            drop(slot.lock().unwrap_or_else(PoisonError::into_inner).take());
        }
        return launched;
    };
    let user: *mut c_void = Box::into_raw(Box::new(f)).cast();
    // SAFETY: `h` is live (the handle rule). `run_boxed` takes the box back when the driver
    // calls it, once; a failed call (a capture's refusal among them) never calls it, and then
    // the box is still ours, taken back here.
    unsafe {
        let added = check((t.cuStreamAddCallback)(h.0, Some(run_boxed), user, 0));
        if added.is_err() {
            drop(Box::from_raw(user.cast::<Once>()));
        }
        added
    }
}

/// What a user object owns (`user_object_owning`).
pub trait UserObjectData: Send + 'static {
    /// Let go: the last reference to the user object is gone (ours, then each graph's and
    /// executable graph's it was handed to, and their launches in flight). On a driver thread,
    /// as a host function.
    fn release(self: Box<Self>);
}

/// The destructor of a user object: takes back the box `user_object_owning` handed over and
/// lets it go.
///
/// # Safety
/// `user` is a `Box<T>` made into a raw pointer, that nothing else takes back.
unsafe extern "C" fn release_owned<T: UserObjectData>(user: *mut c_void) {
    // SAFETY: the caller's contract: the driver calls a user object's destructor once, with
    // the pointer `user_object_owning` gave it, and nothing else takes it back once the object
    // was made.
    let owned = unsafe { Box::from_raw(user.cast::<T>()) };
    run(move || owned.release());
}

/// A user object owning `data`, let go once the last reference is gone (`UserObjectData`);
/// with where `data` lives until then (for a host node that reads it: valid for as long as
/// the object holds it). On an error, `data` back with the error.
pub fn user_object_owning<T: UserObjectData>(
    data: Box<T>,
) -> std::result::Result<(UserObject, NonNull<T>), (DriverError, Box<T>)> {
    let api = match init() {
        Ok(api) => api,
        Err(e) => return Err((e, data)),
    };
    let ptr = NonNull::from(Box::leak(data));
    let mut obj: CUuserObject = null_mut();
    let destroy: CUhostFn = Some(release_owned::<T>);
    let no_sync = cu::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC as c_uint;
    // SAFETY: a valid out-pointer. `release_owned::<T>` takes the box back when the driver
    // destroys the object, once, from any thread (`T` is Send), and makes no CUDA call of its
    // own (custream's refuse in it: `run`); a failed create never calls it, and then the box is
    // still ours, taken back here.
    unsafe {
        let user = ptr.as_ptr().cast();
        match check((api.cuUserObjectCreate)(&mut obj, user, destroy, 1, no_sync)) {
            Ok(()) => Ok((UserObject(obj), ptr)),
            Err(e) => Err((e, Box::from_raw(ptr.as_ptr()))),
        }
    }
}
