//! `Home`: where a driver object lives (its context, that context's id, its device), and the
//! primary-context policy: a driver object is made in its device's primary context, retained
//! for the object's life and kept until exit once used, or in another context its owner
//! keeps; it is destroyed there, once, without the GIL (or later, from a host function:
//! src/object/deferred_release.rs).

use pyo3::prelude::*;

use crate::cpython::gil;
use crate::driver::gate;
use crate::driver::{self, Context, DriverError};
use crate::object::deferred_release::{defer, run_deferred};

/// Where a driver object lives: its context, that context's id when the object was made,
/// its device, and whether we hold a retain on the device's primary context for it.
#[derive(Clone, Copy, Debug)]
pub struct Home {
    pub context: Context,
    pub context_id: u64,
    pub device: i32,
    pub retains_primary: bool,
}

impl Home {
    /// Make a driver object with `make`, in `device`'s primary context (retained for the
    /// object's life), or in `context` when that is given and is another one (no retain:
    /// its owner keeps it). On failure nothing is kept. Without the GIL: a first retain
    /// creates the context (~100 ms), and a driver call that waits on a driver lock must not
    /// hold the GIL, which that lock's holder may need (a host callback, another library's
    /// nogil call): under compute-sanitizer that wait hung a threaded workload.
    pub fn make<H: Send>(
        py: Python<'_>,
        device: i32,
        context: Option<Context>,
        make: impl FnOnce(Context) -> driver::Result<H> + Send,
    ) -> PyResult<(Home, H)> {
        let made = gil::detach(py, move || {
            run_deferred();
            let primary = driver::retain_primary_context(device)?;
            // A device custream has used keeps its primary context until exit, so closing
            // the last stream does not make the next `Stream()` build it again.
            if let Err(e) = driver::keep_primary_context(device) {
                let _ = driver::release_primary_context(device);
                return Err(e);
            }
            let (context, retains_primary) = match context {
                Some(c) if c != primary => {
                    let _ = driver::release_primary_context(device);
                    (c, false)
                }
                _ => (primary, true),
            };
            let made = driver::context_id(context).and_then(|id| Ok((id, make(context)?)));
            if made.is_err() && retains_primary {
                let _ = driver::release_primary_context(device);
            }
            let (context_id, object) = made?;
            Ok::<_, DriverError>((
                Home {
                    context,
                    context_id,
                    device,
                    retains_primary,
                },
                object,
            ))
        });
        Ok(made?)
    }

    /// Destroy the object with `destroy` and give back the retain, without the GIL (see
    /// `make`). After a reset the object is gone with its context, and so is the retain:
    /// nothing is left to release, and destroying or releasing would hit the new context.
    pub fn release(
        self,
        py: Python<'_>,
        destroy: impl FnOnce(Context) -> driver::Result<()> + Send + 'static,
    ) -> driver::Result<()> {
        if gate::in_host_function() {
            // A host function dropped the last reference (it held the object in its
            // arguments): no CUDA call may be made on this thread, so a later call makes it.
            defer(Box::new(move || {
                let _ = self.release_now(destroy);
            }));
            return Ok(());
        }
        gil::detach(py, move || {
            run_deferred();
            self.release_now(destroy)
        })
    }

    /// After a reset the object is gone with its context, and so is the retain: nothing is
    /// left to release, and destroying or releasing would hit the new context.
    fn release_now(self, destroy: impl FnOnce(Context) -> driver::Result<()>) -> driver::Result<()> {
        if driver::ensure_same_context(self.context, self.context_id).is_err() {
            return Ok(());
        }
        let destroyed = destroy(self.context);
        if self.retains_primary {
            destroyed.and(driver::release_primary_context(self.device))
        } else {
            destroyed
        }
    }
}
