//! The releases a host function asked for: no CUDA call may be made on a host function's
//! thread, so a release there (`Home::release`, src/object/home_context.rs) is queued, and the
//! next release or `run_deferred` outside one makes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::driver::gate;

/// Releases a host function asked for, made by the next release or `run_deferred` outside one.
static DEFERRED: Mutex<Vec<Box<dyn FnOnce() + Send>>> = Mutex::new(Vec::new());
static ANY_DEFERRED: AtomicBool = AtomicBool::new(false);

/// Queue `release` for the next release, or `run_deferred`, outside a host function.
pub fn defer(release: Box<dyn FnOnce() + Send>) {
    DEFERRED.lock().unwrap_or_else(PoisonError::into_inner).push(release);
    ANY_DEFERRED.store(true, Ordering::Release);
}

/// Make the releases deferred from host functions; nothing inside one (a load when none is
/// waiting). Needs no GIL: call it detached, since it calls the driver.
pub fn run_deferred() {
    if !ANY_DEFERRED.load(Ordering::Acquire) || gate::in_host_function() || !ANY_DEFERRED.swap(false, Ordering::AcqRel)
    {
        return;
    }
    let waiting = std::mem::take(&mut *DEFERRED.lock().unwrap_or_else(PoisonError::into_inner));
    for release in waiting {
        release();
    }
}
