//! What a capture is to custream, below streams, events and graphs: the captures begun
//! through custream and still open, the streams joined into them, the host functions queued
//! in them, and the decision, before a call that CUDA forbids during a capture, to refuse it
//! or run it relaxed. Handles only: no Python object and no Stream here.
//!
//! CUDA invalidates a whole capture when a call it forbids meets it: `synchronize()` or
//! `query()` on a capturing stream, a query of an event recorded in the capture, and (in
//! "global" mode, or from the capturing thread) some calls on other streams. custream refuses
//! those of its own calls first, with a `CudaError` naming the capture, so the capture stays
//! valid. What it costs:
//! - No capture open, and foreign checks off (the default): one load of `GUARD` before a
//!   query or synchronize, which is zero; nothing else.
//! - A capture begun through custream is open: the call asks the driver whether the stream
//!   captures (`cuStreamIsCapturing`), and calls on other streams run with the thread's
//!   capture mode relaxed, so the driver lets them through instead of invalidating.
//! - `check_foreign_captures(True)`: every query and synchronize asks the driver first (one
//!   driver call), so a capture another library began on the same handle is refused too.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::driver::{
    self, capture_code, CaptureMode, CaptureModeScope, CaptureStatus, DriverError, GraphHandle, StreamHandle,
    UserObject,
};

/// Zero unless a query or synchronize must look for a capture first: the FOREIGN bit
/// (`check_foreign_captures(True)`), and below it the number of captures custream began that
/// are still open.
static GUARD: AtomicU32 = AtomicU32::new(0);
const FOREIGN: u32 = 1 << 31;

/// A capture begun through custream and not yet ended.
struct Capture {
    id: u64,
    mode: CaptureMode,
    /// The stream it was begun on, then the streams joined into it through `wait()`.
    streams: Vec<u64>,
    /// The payloads of host functions queued in it, for its graph to own.
    user_objects: Vec<UserObject>,
}

static OPEN: Mutex<Vec<Capture>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn open() -> MutexGuard<'static, Vec<Capture>> {
    OPEN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The name of a capture mode, as `begin_capture(mode=...)` takes it.
pub fn mode_name(mode: CaptureMode) -> &'static str {
    match mode {
        CaptureMode::Global => "global",
        CaptureMode::ThreadLocal => "thread_local",
        CaptureMode::Relaxed => "relaxed",
    }
}

/// Set whether every query and synchronize first asks the driver if the stream captures
/// (a capture begun outside custream); returns the previous setting.
pub fn set_foreign_checks(on: bool) -> bool {
    let before = if on {
        GUARD.fetch_or(FOREIGN, Ordering::AcqRel)
    } else {
        GUARD.fetch_and(!FOREIGN, Ordering::AcqRel)
    };
    before & FOREIGN != 0
}

pub fn foreign_checks() -> bool {
    GUARD.load(Ordering::Acquire) & FOREIGN != 0
}

/// Whether a query or synchronize must look for a capture first (through `checked`): one
/// load, false unless a capture begun through custream is open or foreign checks are on.
#[inline]
pub fn checks_needed() -> bool {
    GUARD.load(Ordering::Acquire) != 0
}

/// What `checked` decides for a handle: an error, nothing to do, or a relaxed mode to keep.
pub fn before_sync(h: StreamHandle, what: &str) -> driver::Result<Option<CaptureModeScope>> {
    let ours_open = GUARD.load(Ordering::Acquire) & !FOREIGN != 0;
    if ours_open {
        if let Some(message) = describe_own(h.as_u64()) {
            return Err(refuse(what, h, &message));
        }
    }
    match driver::stream_capture_status(h) {
        Ok(CaptureStatus::None) => {}
        Ok(CaptureStatus::Active) => {
            return Err(refuse(
                what,
                h,
                "begun outside custream (another library's capture on this handle)",
            ));
        }
        Ok(CaptureStatus::Invalidated) => {
            return Err(refuse(what, h, "begun outside custream, and already invalidated"));
        }
        Err(DriverError::Cuda {
            code: capture_code::IMPLICIT,
            ..
        }) => {
            return Err(driver::refusal(
                capture_code::IMPLICIT,
                format!(
                    "{what} refused: this is the legacy default stream, which waits for every \
                     blocking stream of its context, and one of them is capturing a CUDA graph; \
                     CUDA would invalidate that capture. Use a non-blocking stream, or end the capture first"
                ),
            ));
        }
        Err(e) => return Err(e),
    }
    // In "global" mode, or on the thread of a "thread_local" capture, the driver takes some
    // calls on other streams as unsafe and invalidates the capture; relaxed, it lets them by.
    ours_open
        .then(|| CaptureModeScope::enter(CaptureMode::Relaxed))
        .transpose()
}

/// The calling thread relaxed while a capture begun through custream is open (as
/// `before_sync` does), for a query of an event of custream's own between the slices of a
/// wait: in "global" mode the driver takes such a query as unsafe.
pub fn relaxed_while_ours_open() -> driver::Result<Option<CaptureModeScope>> {
    (GUARD.load(Ordering::Acquire) & !FOREIGN != 0)
        .then(|| CaptureModeScope::enter(CaptureMode::Relaxed))
        .transpose()
}

fn refuse(what: &str, h: StreamHandle, capture: &str) -> DriverError {
    driver::refusal(
        capture_code::UNSUPPORTED,
        format!(
            "{what} refused on stream {:#x}: it is capturing a CUDA graph ({capture}). CUDA forbids \
             {what} during a capture and would invalidate it; the capture is still valid. End the \
             capture first (end_capture()), then launch the graph and synchronize",
            h.as_u64()
        ),
    )
}

/// The capture begun through custream that `handle` takes part in, in words.
fn describe_own(handle: u64) -> Option<String> {
    let open = open();
    let c = open.iter().find(|c| c.streams.contains(&handle))?;
    let how = if c.streams[0] == handle {
        "begun by custream on it".to_owned()
    } else {
        format!("joined through wait() into the capture on stream {:#x}", c.streams[0])
    };
    Some(format!(
        "custream capture #{} in '{}' mode, {how}",
        c.id,
        mode_name(c.mode)
    ))
}

/// A capture is about to begin on `h`: known before the driver hears of it, so no call of
/// ours can slip in between. Returns its id, for `forget` if the driver refuses it.
pub fn opening(h: StreamHandle, mode: CaptureMode) -> u64 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    open().push(Capture {
        id,
        mode,
        streams: vec![h.as_u64()],
        user_objects: Vec::new(),
    });
    GUARD.fetch_add(1, Ordering::AcqRel);
    id
}

/// The driver refused to begin capture `id`.
pub fn forget(id: u64) {
    forget_capture(|c| c.id == id);
}

/// Remove the captures `which` picks from `OPEN`, and release what their host functions
/// queued (their graphs never formed).
fn forget_capture(which: impl Fn(&Capture) -> bool) {
    let gone: Vec<Capture> = {
        let mut open = open();
        let (gone, kept) = std::mem::take(&mut *open).into_iter().partition(|c| which(c));
        *open = kept;
        gone
    };
    for c in gone {
        GUARD.fetch_sub(1, Ordering::AcqRel);
        for obj in c.user_objects {
            let _ = driver::user_object_release(obj);
        }
    }
}

/// An owned stream is about to be destroyed. A custream capture begun on it can never be
/// ended after that, and would keep every later query and synchronize on the slow path (and
/// refuse them on a stream that gets the same handle): end it here, discard its graph and
/// release its host functions. A stream joined into a capture just leaves the list.
pub fn stream_destroyed(h: StreamHandle) {
    if GUARD.load(Ordering::Acquire) & !FOREIGN == 0 {
        return;
    }
    let handle = h.as_u64();
    let began_here = {
        let mut open = open();
        for c in open.iter_mut().filter(|c| c.streams[0] != handle) {
            c.streams.retain(|&s| s != handle);
        }
        open.iter().any(|c| c.streams[0] == handle)
    };
    if began_here {
        // From another thread than the one that began it (a thread_local or global capture
        // closed by the garbage collector) the driver may refuse; the destroy then ends it
        // (tests/gpu closes from both threads in every mode). Either way no graph of it is
        // ever made to run the host functions.
        if let Ok(graph) = driver::stream_end_capture(h) {
            let _ = graph.destroy();
        }
        forget_capture(|c| c.streams[0] == handle);
    }
}

/// The capture `handle` takes part in was ended: hand the payloads of its host functions
/// to `graph` (or release them, if it formed none).
pub fn ended(handle: u64, graph: Option<GraphHandle>) {
    let found = {
        let mut open = open();
        open.iter().position(|c| c.streams[0] == handle).map(|i| open.remove(i))
    };
    let Some(c) = found else { return };
    GUARD.fetch_sub(1, Ordering::AcqRel);
    for obj in c.user_objects {
        let kept = graph.map(|g| driver::graph_take_user_object(g, obj));
        if !matches!(kept, Some(Ok(()))) {
            let _ = driver::user_object_release(obj);
        }
    }
}

/// A host function was queued in the capture on `h`: its graph will own `payload`. A capture
/// custream does not know (begun or joined by another library) never hands over its graph,
/// so the payload is kept for the life of the process instead: leaked, never freed early.
pub fn keep_until_captured(h: StreamHandle, payload: UserObject) {
    let mut open = open();
    if let Some(c) = open.iter_mut().find(|c| c.streams.contains(&h.as_u64())) {
        c.user_objects.push(payload);
    }
}

/// The custream capture `handle` takes part in, if any, by id. No lock unless one is open.
pub fn own_capture_of(handle: u64) -> Option<u64> {
    if GUARD.load(Ordering::Acquire) & !FOREIGN == 0 {
        return None;
    }
    open().iter().find(|c| c.streams.contains(&handle)).map(|c| c.id)
}

/// Whether custream capture `id` is still open.
pub fn is_open(id: u64) -> bool {
    open().iter().any(|c| c.id == id)
}

/// `waiter` waited on an event recorded in capture `id`: it joined it.
pub fn joined(id: u64, waiter: u64) {
    if let Some(c) = open().iter_mut().find(|c| c.id == id) {
        if !c.streams.contains(&waiter) {
            c.streams.push(waiter);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry is the process's: these tests take turns, and use handles of their own.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stream(raw: u64) -> StreamHandle {
        // SAFETY: the registry only stores and compares the handle; no driver call is made.
        unsafe { StreamHandle::from_raw(raw) }
    }

    #[test]
    fn an_open_capture_is_known_until_it_ends() {
        let _turn = serial();
        let h = 0xC0_0001;
        assert!(!checks_needed(), "no capture open, foreign checks off: the fast path");
        assert_eq!(own_capture_of(h), None);
        let id = opening(stream(h), CaptureMode::ThreadLocal);
        assert!(checks_needed() && is_open(id));
        assert_eq!(own_capture_of(h), Some(id));
        let said = describe_own(h).expect("described");
        assert!(
            said.contains(&format!(
                "custream capture #{id} in 'thread_local' mode, begun by custream on it"
            )),
            "{said}"
        );
        assert_eq!(own_capture_of(h + 1), None, "another stream takes no part");
        ended(h, None); // no graph: nothing to hand over
        assert!(!is_open(id) && !checks_needed());
        assert_eq!(own_capture_of(h), None);
        ended(h, None); // a second end finds nothing
        assert!(!checks_needed(), "the count never goes below zero");
    }

    #[test]
    fn a_stream_joins_by_waiting_and_leaves_when_destroyed() {
        let _turn = serial();
        let (origin, waiter) = (0xC0_0010, 0xC0_0020);
        let id = opening(stream(origin), CaptureMode::Global);
        joined(id, waiter);
        joined(id, waiter); // once only
        assert_eq!(own_capture_of(waiter), Some(id));
        let said = describe_own(waiter).expect("described");
        assert!(
            said.contains(&format!(
                "in 'global' mode, joined through wait() into the capture on stream {origin:#x}"
            )),
            "{said}"
        );
        stream_destroyed(stream(waiter)); // a joined stream just leaves (no driver call)
        assert_eq!(own_capture_of(waiter), None);
        assert!(is_open(id), "the capture goes on on its own stream");
        forget(id); // as when the driver refuses to begin it
        assert!(!is_open(id) && !checks_needed());
        joined(id, waiter); // joining a capture that is gone does nothing
        assert_eq!(own_capture_of(waiter), None);
    }

    #[test]
    fn foreign_checks_are_a_bit_of_their_own() {
        let _turn = serial();
        assert!(!set_foreign_checks(true), "off by default");
        assert!(foreign_checks() && checks_needed());
        let id = opening(stream(0xC0_0030), CaptureMode::Relaxed);
        assert!(describe_own(0xC0_0030).expect("described").contains("'relaxed' mode"));
        assert!(set_foreign_checks(false), "returns the previous setting");
        assert!(
            !foreign_checks() && checks_needed(),
            "the open capture still needs checks"
        );
        ended(0xC0_0030, None);
        assert!(!is_open(id) && !checks_needed());
        assert!(!set_foreign_checks(false));
    }

    #[test]
    fn captures_get_distinct_ids_and_end_one_by_one() {
        let _turn = serial();
        let (a, b) = (0xC0_0040, 0xC0_0050);
        let ia = opening(stream(a), CaptureMode::ThreadLocal);
        let ib = opening(stream(b), CaptureMode::ThreadLocal);
        assert_ne!(ia, ib);
        assert_eq!((own_capture_of(a), own_capture_of(b)), (Some(ia), Some(ib)));
        ended(a, None);
        assert!(!is_open(ia) && is_open(ib) && checks_needed());
        ended(b, None);
        assert!(!checks_needed());
    }
}
