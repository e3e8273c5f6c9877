//! The typed handles every driver call takes (the module's note in src/driver/mod.rs gives
//! the handle rule): `Copy` views, and the owning handles that destroy consumes.

use super::*;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident($raw:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        pub struct $name(pub(super) $raw);

        // SAFETY: a driver handle is an opaque name for a driver object, never dereferenced
        // by us; the driver accepts it from any thread (its own locking orders the calls).
        unsafe impl Send for $name {}
        // SAFETY: as above; sharing one only copies the name.
        unsafe impl Sync for $name {}
    };
}

handle!(
    /// A CUDA context (never null).
    Context(CUcontext)
);
handle!(
    /// A CUDA stream, or one of the default-stream tokens 0, 1 and 2.
    StreamHandle(CUstream)
);
handle!(
    /// A CUDA event.
    EventHandle(CUevent)
);

/// An owning driver handle next to its `Copy` view, as CCCL splits `cuda::stream` from
/// `cuda::stream_ref`: not `Copy`, not `Clone`, and destroying it consumes it, so a second
/// destroy does not compile. The view (`handle()`) is for calls while it lives.
macro_rules! owned {
    ($(#[$doc:meta])* $name:ident($view:ident)) => {
        $(#[$doc])*
        #[derive(PartialEq, Eq, Debug)]
        pub struct $name(pub(super) $view);

        impl $name {
            /// The view for calls, valid until `self` is destroyed.
            pub fn handle(&self) -> $view {
                self.0
            }
        }
    };
}
owned!(
    /// A stream custream created and must destroy once.
    ///
    /// ```no_run
    /// fn done(s: custream::handles::OwnedStream) -> Result<(), custream::handles::DriverError> {
    ///     s.destroy()
    /// }
    /// ```
    ///
    /// A second destroy is refused by the compiler (the first one moved the stream):
    ///
    /// ```compile_fail,E0382
    /// fn done(s: custream::handles::OwnedStream) -> Result<(), custream::handles::DriverError> {
    ///     s.destroy()?;
    ///     s.destroy()
    /// }
    /// ```
    OwnedStream(StreamHandle)
);
owned!(
    /// An event custream created and must destroy once, in its context.
    ///
    /// ```compile_fail,E0382
    /// fn done(
    ///     e: custream::handles::OwnedEvent,
    ///     ctx: custream::handles::Context,
    /// ) -> Result<(), custream::handles::DriverError> {
    ///     e.destroy(ctx)?;
    ///     e.destroy(ctx)
    /// }
    /// ```
    OwnedEvent(EventHandle)
);

impl OwnedStream {
    /// Hand the stream to an object that stores raw handles (a Stream's C layout); the
    /// object owns it from then on, until `from_raw` takes it back.
    pub fn into_raw(self) -> u64 {
        self.0.as_u64()
    }

    /// # Safety
    /// `raw` came from `into_raw`, and is taken back once.
    pub unsafe fn from_raw(raw: u64) -> OwnedStream {
        OwnedStream(StreamHandle(raw as usize as CUstream))
    }

    /// Destroy the stream. Needs no current context: the driver finds the stream's own (as
    /// for synchronize), so a stream is destroyed from any thread, whatever is current there.
    pub fn destroy(self) -> Result<()> {
        let api = init()?;
        // SAFETY: an owned stream is live until this, its one destroy (it is consumed).
        check(unsafe { (api.cuStreamDestroy_v2)(self.0 .0) })
    }
}

impl OwnedEvent {
    /// Destroy the event, in its context `ctx`.
    pub fn destroy(self, ctx: Context) -> Result<()> {
        let api = init()?;
        // SAFETY: an owned event is live until this, its one destroy (it is consumed).
        in_context(ctx, || check(unsafe { (api.cuEventDestroy_v2)(self.0 .0) }))
    }
}

impl Context {
    /// # Safety
    /// `raw` is null or a context the driver handed out (it may since have been reset:
    /// `ensure_same_context` is how a user finds out).
    pub unsafe fn from_raw(raw: *mut c_void) -> Option<Context> {
        (!raw.is_null()).then(|| Context(raw.cast()))
    }

    pub fn as_raw(self) -> *mut c_void {
        self.0.cast()
    }
}

impl StreamHandle {
    /// # Safety
    /// `raw` is a default-stream token or a stream the driver handed out, kept alive by its
    /// owner for as long as the handle is used.
    pub unsafe fn from_raw(raw: u64) -> StreamHandle {
        StreamHandle(raw as usize as CUstream)
    }

    pub fn as_u64(self) -> u64 {
        self.0 as usize as u64
    }
}

impl EventHandle {
    pub fn as_u64(self) -> u64 {
        self.0 as usize as u64
    }
}
