//! Notifier streams: how an armed wait learns, without a thread of its own and without Python
//! on the driver's thread, that the GPU reached its event (src/waits/for_gpu.rs composes them).
//!
//! A notifier is a stream of custream's (from a pool per context, kept for the process) that
//! waits on the awaited event and then runs `ring`, a C host function, on the driver's
//! thread. `ring` makes no CUDA call and never touches Python: it gives the wait's `Wake`
//! (a condition variable, an event loop's eventfd, or a post to custream's host thread).
//!
//! The driver bounds the host functions pending at once: on an H100 (driver 580)
//! `cuLaunchHostFunc` blocked until one had run when 56 streams had one pending, and again
//! at the 225th pending on four streams (56 each), which froze the event loop that armed
//! them (tests/gpu/test_gpu_waits.py arms 400 awaits). So custream keeps at most one host
//! function of its waits pending per notifier, and at most `SPREAD` notifiers busy per
//! context:
//! - A wait gets a notifier of its own while the context has fewer than `SPREAD` busy;
//!   a wait on a later custream record of a stream joins the notifier of an earlier one (a
//!   stream completes its events in the order they were recorded); the rest join the least
//!   busy.
//! - A wait that joins a busy notifier queues the event wait on it at once (the event is
//!   live only for the call) and records a *mark*, an event of the notifier's own, after it.
//!   The mark stands for the wait from then on: it is parked, in order. When the notifier's
//!   host function rings, custream's host thread takes the next parked wait: its mark done
//!   already, it gives the signal; else it queues the next host function on the notifier's
//!   *bell* stream behind the mark. So a parked wait is signalled once the notifier passes
//!   its event (as if queued there), one host-thread hop later.
//!
//! A notifier goes back to the pool when its last wait is signalled.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use pyo3::prelude::*;

use crate::cpython::gil;
use crate::cpython::interrupt::{self, Deadline};
use crate::cpython::stream_object::{StreamObject, CUSTREAM_FLAG_GREEN};
use crate::driver::{
    self, CaptureMode, CaptureModeScope, Context, DriverError, EventHandle, OwnedEvent, OwnedStream, StreamHandle,
};
use crate::host;
use crate::host::thread::After;
use crate::waits::notifier_maker;
use crate::waits::wake::Wake;

/// Waits armed and not yet signalled (for tests: nothing stays behind a finished wait).
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// Armed waits not yet signalled, parked ones included.
pub fn pending_count() -> usize {
    PENDING.load(Ordering::Acquire)
}

/// A notifier: a stream that waits on awaited events and rings; an event a thread's stream
/// wait records on the synchronized stream; the bell stream and the marks of parked waits.
/// Made in one context, kept for the process.
pub struct Notifier {
    stream: OwnedStream,
    event: OwnedEvent,
    context: Context,
    context_id: u64,
    /// Made on the maker thread when a parked wait first needs it.
    bell: Option<OwnedStream>,
    marks: Vec<OwnedEvent>,
}

impl Notifier {
    /// The event a thread's stream wait records on the stream it synchronizes.
    pub fn event(&self) -> EventHandle {
        self.event.handle()
    }
}

/// Idle notifiers, by context id (an id is never reused, so a reset context's notifiers are
/// never handed out again).
static IDLE: Mutex<Option<HashMap<u64, Vec<Notifier>>>> = Mutex::new(None);

/// Notifier and bell streams made (kept for the process).
static STREAMS: AtomicUsize = AtomicUsize::new(0);

/// The streams custream made for its waits: notifiers and their bells.
pub fn notifier_streams() -> usize {
    STREAMS.load(Ordering::Relaxed)
}

/// A stream of `ctx` for custream's own use, made relaxed: a capture open on this thread
/// (custream's or another library's) would take the creation as unsafe.
fn make_stream(ctx: Context) -> driver::Result<OwnedStream> {
    let _relaxed = CaptureModeScope::enter(CaptureMode::Relaxed)?;
    let made = driver::create_stream(ctx, driver::current_context()?, true, 0)?;
    STREAMS.fetch_add(1, Ordering::Relaxed);
    Ok(made)
}

/// The idle notifiers of the context `id`, in `IDLE`'s map (its lock held).
fn idle_of(idle: &mut Option<HashMap<u64, Vec<Notifier>>>, id: u64) -> &mut Vec<Notifier> {
    idle.get_or_insert_with(HashMap::new).entry(id).or_default()
}

/// An idle notifier of the context `id`, if there is one.
fn take_idle(id: u64) -> Option<Notifier> {
    idle_of(&mut IDLE.lock().unwrap_or_else(PoisonError::into_inner), id).pop()
}

/// A new notifier of `ctx` (whose id is `id`).
fn make(ctx: Context, id: u64) -> driver::Result<Notifier> {
    let stream = make_stream(ctx)?;
    match driver::event_create(ctx, false) {
        Ok(event) => Ok(Notifier {
            stream,
            event,
            context: ctx,
            context_id: id,
            bell: None,
            marks: Vec::new(),
        }),
        Err(e) => {
            let _ = stream.destroy();
            Err(e)
        }
    }
}

/// An idle notifier of `ctx`, or a new one made here, without the GIL (making a stream
/// takes the driver's locks, and may wait while the GPU is busy).
pub fn take(py: Python<'_>, ctx: Context) -> PyResult<Notifier> {
    let id = driver::context_id(ctx)?;
    match take_idle(id) {
        Some(n) => Ok(n),
        None => Ok(gil::detach(py, move || make(ctx, id))?),
    }
}

/// Contexts (by id) whose notifiers `prepare` made, or is making; the last one asked for.
static PREPARED: Mutex<Vec<u64>> = Mutex::new(Vec::new());
static LAST_PREPARED: AtomicU64 = AtomicU64::new(u64::MAX);

/// Make the notifiers of the context `made` runs in (a stream custream has just made), each
/// with its bell, unless that context's were made already: `SPREAD` of them, so that the
/// context's awaits park behind these and make no stream. The driver can block
/// `cuStreamCreate`, spinning, while many of a context's streams are busy (an H200 spent a
/// core for the whole wait when 64 awaits made their notifiers behind busy kernels); a stream
/// custream has just made is not busy yet, and neither, most often, is the GPU. Without the
/// GIL; a notifier the driver refuses is left unmade (the context's waits make theirs as
/// before). A context only other libraries' streams run in gets its notifiers at its first
/// wait.
pub fn prepare(py: Python<'_>, made: &Bound<'_, PyAny>) {
    let Ok(s) = StreamObject::of(made, "Stream()") else {
        return;
    };
    if s.flags() & CUSTREAM_FLAG_GREEN != 0 {
        return; // a green context is for a slice of the SMs: its waits make their own
    }
    let (Some(ctx), id) = s.known_context() else {
        return;
    };
    // Most streams are made in the context the last one was: no lock for those.
    if LAST_PREPARED.load(Ordering::Relaxed) == id {
        return;
    }
    {
        let mut prepared = PREPARED.lock().unwrap_or_else(PoisonError::into_inner);
        LAST_PREPARED.store(id, Ordering::Relaxed);
        if prepared.contains(&id) {
            return;
        }
        prepared.push(id);
    }
    gil::detach(py, move || {
        let have = idle_of(&mut IDLE.lock().unwrap_or_else(PoisonError::into_inner), id).len();
        for _ in have..SPREAD {
            let Ok(mut n) = make(ctx, id) else {
                return;
            };
            match make_stream(ctx) {
                Ok(bell) => n.bell = Some(bell),
                Err(_) => {
                    put_back(n);
                    return;
                }
            }
            put_back(n);
        }
    });
}

/// Notifiers given back: threads waiting for one (`take_within`) wake, counted in `AWAITING`
/// so that a give-back with none waiting makes no wake-up call.
static GIVEN: Condvar = Condvar::new();
static AWAITING: AtomicUsize = AtomicUsize::new(0);

/// Longest a thread waiting for a notifier goes without asking whether its work ended.
const LOOK: Duration = Duration::from_millis(2);

/// For a thread's wait (src/waits/for_gpu.rs, `StreamWait`): an idle notifier of `ctx`, or,
/// when there is none, one the maker thread makes while the caller waits in `interrupt::wait`'s
/// slices (signal handlers run, a timeout holds; the driver may block making a stream for as
/// long as the GPU is busy, and that wait no signal ends), asking `done` every `LOOK`
/// meanwhile: None when the work ended first.
pub fn take_within(
    py: Python<'_>,
    ctx: Context,
    deadline: Deadline,
    what: &str,
    done: impl Fn() -> driver::Result<bool> + Send,
) -> PyResult<Option<Notifier>> {
    let id = driver::context_id(ctx)?;
    if let Some(n) = take_idle(id) {
        return Ok(Some(n));
    }
    let mut got = None;
    let found = &mut got;
    interrupt::wait(py, deadline, what, move |slice| {
        make_spare(ctx, id, 0);
        let idle = IDLE.lock().unwrap_or_else(PoisonError::into_inner);
        AWAITING.fetch_add(1, Ordering::SeqCst);
        let (mut idle, _) = GIVEN
            .wait_timeout_while(idle, slice.min(LOOK), |idle| idle_of(idle, id).is_empty())
            .unwrap_or_else(PoisonError::into_inner);
        AWAITING.fetch_sub(1, Ordering::SeqCst);
        *found = idle_of(&mut idle, id).pop();
        drop(idle);
        Ok(found.is_some() || done()?)
    })?;
    Ok(got)
}

/// Contexts (by id) whose spare notifier the maker thread is making now.
static MAKING: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Spare notifiers the maker thread makes at a time for a context.
const SPARES: usize = 4;

/// Have the maker thread make spare notifiers of `ctx` for the next event waits (up to
/// `SPARES`, and `SPREAD` with the `busy_now`), unless it is making some already.
fn make_spare(ctx: Context, id: u64, busy_now: usize) {
    let wanted = SPARES.min(SPREAD.saturating_sub(busy_now));
    if wanted == 0 {
        return;
    }
    {
        let mut making = MAKING.lock().unwrap_or_else(PoisonError::into_inner);
        if making.contains(&id) {
            return;
        }
        making.push(id);
    }
    notifier_maker::later(Box::new(move || {
        for _ in 0..wanted {
            match make(ctx, id) {
                Ok(n) => put_back(n),
                Err(_) => break,
            }
        }
        MAKING
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|&m| m != id);
    }));
}

pub fn put_back(n: Notifier) {
    idle_of(&mut IDLE.lock().unwrap_or_else(PoisonError::into_inner), n.context_id).push(n);
    // After the push, under the lock a waiter holds from its look to its sleep: seen, or woken.
    if AWAITING.load(Ordering::SeqCst) > 0 {
        GIVEN.notify_all();
    }
}

/// Busy notifiers of event waits, by stream handle. Every context's, at most `SPREAD` of each.
static BUSY: Mutex<Option<HashMap<u64, Busy>>> = Mutex::new(None);

/// Notifiers of event waits busy at once per context, each with one host function pending:
/// well under the driver's bound, which thread waits' notifiers (`StreamWait`) and other
/// libraries' host functions share.
const SPREAD: usize = 16;

struct Busy {
    notifier: Notifier,
    /// Waits queued and not yet signalled: the one whose host function is pending, the
    /// parked ones, and any being queued now.
    queued: usize,
    /// Whether a host function of this notifier's is pending (or on its way, the next parked
    /// wait's, through custream's host thread).
    ringing: bool,
    parked: VecDeque<Parked>,
    /// Where the event of the last wait queued on it was recorded, if custream knows.
    last: Option<Recorded>,
}

/// A wait queued on a busy notifier without a host function: signalled once `mark`,
/// recorded on the notifier after the wait's event wait, is reached.
struct Parked {
    mark: OwnedEvent,
    signal: Wake,
}

/// Where custream recorded an awaited event: the stream's handle and the record's place in
/// custream's order of records. A stream completes its events in the order they were
/// recorded, so a wait on a later event of the same stream can queue on the notifier of an
/// earlier one at no cost: the notifier reaches it no later than the stream does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Recorded {
    pub stream: u64,
    pub seq: u64,
}

fn busy() -> MutexGuard<'static, Option<HashMap<u64, Busy>>> {
    BUSY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A busy notifier of the context joined by one more wait.
struct Joined {
    h: StreamHandle,
    ctx: Context,
    /// The context's busy notifiers.
    busy: usize,
}

/// A busy notifier of the context for one more wait, on an event recorded at `after` if
/// known: the notifier whose last wait is on an earlier record of the same stream; else, once
/// the context has `SPREAD` busy ones (or with `any`, whenever it has one), the one with the
/// fewest queued.
fn join_busy(context_id: u64, after: Option<Recorded>, any: bool) -> Option<Joined> {
    let mut guard = busy();
    let map = guard.get_or_insert_with(HashMap::new);
    let seq = |b: &Busy| b.last.map(|l| l.seq);
    let mut count = 0;
    let mut least: Option<&mut Busy> = None;
    let mut behind: Option<&mut Busy> = None;
    for b in map.values_mut().filter(|b| b.notifier.context_id == context_id) {
        count += 1;
        let earlier = match (b.last, after) {
            (Some(last), Some(after)) => last.stream == after.stream && last.seq < after.seq,
            _ => false,
        };
        if earlier && behind.as_deref().is_none_or(|x| seq(x) < seq(b)) {
            behind = Some(b);
        } else if least.as_deref().is_none_or(|l| b.queued < l.queued) {
            least = Some(b);
        }
    }
    let chosen = match (behind, least) {
        (Some(b), _) => b,
        (None, Some(l)) if any || count >= SPREAD => l,
        _ => return None,
    };
    chosen.queued += 1;
    chosen.last = after;
    Some(Joined {
        h: chosen.notifier.stream.handle(),
        ctx: chosen.notifier.context,
        busy: count,
    })
}

/// A wait queued on the busy notifier `h` is over (signalled, or never queued), its mark
/// (if any) free again. If it was the one rung for (`rang`), the next parked wait goes to
/// custream's host thread; the last wait gives the notifier back. No CUDA call: `ring`
/// calls it on the driver's thread.
fn leave_busy(h: StreamHandle, mark: Option<OwnedEvent>, rang: bool) {
    let mut next = None;
    let idle = {
        let mut guard = busy();
        let map = guard.get_or_insert_with(HashMap::new);
        match map.get_mut(&h.as_u64()) {
            Some(b) => {
                b.notifier.marks.extend(mark);
                b.queued -= 1;
                if rang {
                    next = b.parked.pop_front();
                    b.ringing = next.is_some();
                }
                match b.queued {
                    0 => map.remove(&h.as_u64()),
                    _ => None,
                }
            }
            None => None,
        }
    };
    if let Some(n) = idle {
        put_back(n.notifier);
    }
    if let Some(p) = next {
        host::thread::post(Box::new(move |py| {
            advance(py, h, p);
            After::Nothing
        }));
    }
}

/// Whose notifier a pending wait is queued on.
enum Owner {
    /// A thread's stream wait: its own, which records its event on the stream.
    Alone(Box<Notifier>),
    /// An event wait: a busy notifier's, by stream handle.
    Busy(StreamHandle),
}

impl Owner {
    /// The wait is over (signalled, or never queued): give the notifier back, or leave it.
    fn release(self, mark: Option<OwnedEvent>) {
        match self {
            Owner::Alone(n) => put_back(*n),
            Owner::Busy(h) => leave_busy(h, mark, true),
        }
    }
}

/// What `ring` owns: the signal, the notifier to give back or leave, the mark to free.
struct Pending {
    signal: Wake,
    owner: Owner,
    mark: Option<OwnedEvent>,
}

impl Pending {
    /// The wait is reached: signal, then free the notifier. After the signal: a thread that
    /// looks at the notifier's event between its slices sees it done, not recorded again for
    /// another wait.
    fn give(self) {
        self.signal.give();
        self.owner.release(self.mark);
        PENDING.fetch_sub(1, Ordering::Release);
    }

    /// The wait can no longer be signalled (a driver call failed): free the notifier; the
    /// signal comes back, to be dropped where Python may be entered (a future's reference).
    /// The waiter learns from the driver: a thread between its slices, an event loop or a
    /// future's watch once a second.
    fn fail(self) -> Wake {
        self.owner.release(self.mark);
        PENDING.fetch_sub(1, Ordering::Release);
        self.signal
    }
}

/// The host function behind every armed wait, on the driver's thread: no Python, no CUDA.
unsafe extern "C" fn ring(user: *mut c_void) {
    // SAFETY: `user` is the `Pending` that `queue` leaked for this one call.
    unsafe { Box::from_raw(user.cast::<Pending>()) }.give();
}

/// Queue `pending`'s `ring` on stream `h` behind `awaited`. On failure `ring` will never
/// run: `pending` comes back with the error.
fn ring_behind(h: StreamHandle, awaited: EventHandle, pending: Pending) -> Result<(), (DriverError, Pending)> {
    let user = Box::into_raw(Box::new(pending));
    let queued = (|| {
        driver::stream_wait_event(h, awaited)?;
        // SAFETY: `ring` takes no Python and makes no CUDA call; it owns `user` once called.
        unsafe { driver::launch_host_func(h, ring, user.cast()) }
    })();
    // SAFETY: the launch failed, so `ring` will never run: the box is still ours.
    queued.map_err(|e| (e, *unsafe { Box::from_raw(user) }))
}

/// Where an event wait goes.
enum Place {
    /// Parked on a busy notifier.
    Park(Joined),
    /// On a notifier of its own.
    Own(Notifier),
}

/// Where a wait on an event of `ctx` (whose id is `id`) recorded at `after` goes: parked on
/// a busy notifier that reaches it in stream order (or any, once the context has `SPREAD`),
/// else an idle notifier of its own, else parked on the least busy one while the maker
/// thread makes spares; only a context's first wait makes its notifier here.
fn place(py: Python<'_>, ctx: Context, id: u64, after: Option<Recorded>) -> PyResult<Place> {
    if let Some(j) = join_busy(id, after, false) {
        return Ok(Place::Park(j));
    }
    if let Some(n) = take_idle(id) {
        return Ok(Place::Own(n));
    }
    if let Some(j) = join_busy(id, after, true) {
        make_spare(ctx, id, j.busy);
        return Ok(Place::Park(j));
    }
    let n = take(py, ctx)?;
    make_spare(ctx, id, 1);
    Ok(Place::Own(n))
}

/// Queue `signal` behind `ev`, a live event of `ctx` (the caller holds it open for the call)
/// recorded at `after` if custream knows (`place`).
pub fn arm(py: Python<'_>, ev: EventHandle, ctx: Context, after: Option<Recorded>, signal: Wake) -> PyResult<()> {
    let n = match place(py, ctx, driver::context_id(ctx)?, after)? {
        // A signal that comes back with an error is dropped here, attached.
        Place::Park(j) => return gil::brief(py, move || park(j.h, j.ctx, ev, signal)).map_err(|(e, _s)| e.into()),
        Place::Own(n) => n,
    };
    let h = n.stream.handle();
    let busy_one = Busy {
        notifier: n,
        queued: 1,
        ringing: true,
        parked: VecDeque::new(),
        last: after,
    };
    busy().get_or_insert_with(HashMap::new).insert(h.as_u64(), busy_one);
    PENDING.fetch_add(1, Ordering::AcqRel);
    let pending = Pending {
        signal,
        owner: Owner::Busy(h),
        mark: None,
    };
    gil::brief(py, move || ring_behind(h, ev, pending).map_err(|(e, p)| (e, p.fail()))).map_err(|(e, _signal)| e.into())
}

/// Queue the wait on `ev` on `h`, a busy notifier of `ctx` joined for it, with a mark after
/// it; park it, or ring behind the mark on the bell if the notifier rings for no one now.
fn park(h: StreamHandle, ctx: Context, ev: EventHandle, signal: Wake) -> Result<(), (DriverError, Wake)> {
    let free = busy()
        .as_mut()
        .and_then(|m| m.get_mut(&h.as_u64()))
        .and_then(|b| b.notifier.marks.pop());
    let mark = match free.map_or_else(|| driver::event_create(ctx, false), Ok) {
        Ok(mark) => mark,
        Err(e) => {
            leave_busy(h, None, false);
            return Err((e, signal));
        }
    };
    if let Err(e) = driver::stream_wait_event(h, ev).and_then(|()| driver::event_record(mark.handle(), h)) {
        leave_busy(h, Some(mark), false);
        return Err((e, signal));
    }
    PENDING.fetch_add(1, Ordering::AcqRel);
    let first = {
        let mut guard = busy();
        let b = guard.as_mut().and_then(|m| m.get_mut(&h.as_u64()));
        // `queued` counts this wait: the notifier stays busy until it is signalled.
        let b = b.expect("a joined notifier stays busy while a wait is queued on it");
        let parked = Parked { mark, signal };
        if b.ringing {
            b.parked.push_back(parked);
            None
        } else {
            b.ringing = true;
            Some(parked)
        }
    };
    match first {
        Some(p) => ring_parked(h, p).map_err(|(e, pending)| (e, pending.fail())),
        None => Ok(()),
    }
}

/// The bell stream of busy notifier `h`, if made.
fn bell_of(h: StreamHandle) -> Option<StreamHandle> {
    let guard = busy();
    let b = guard.as_ref().and_then(|m| m.get(&h.as_u64()));
    let b = b.expect("a notifier ringing for a parked wait stays busy");
    b.notifier.bell.as_ref().map(OwnedStream::handle)
}

/// Ring for the parked wait `p` of busy notifier `h` on its bell stream, behind its mark; if
/// the bell is not made yet, the maker thread makes it and rings.
fn ring_parked(h: StreamHandle, p: Parked) -> Result<(), (DriverError, Pending)> {
    let Some(bell) = bell_of(h) else {
        notifier_maker::later(Box::new(move || make_bell_and_ring(h, p)));
        return Ok(());
    };
    let Parked { mark, signal } = p;
    let m = mark.handle();
    let pending = Pending {
        signal,
        owner: Owner::Busy(h),
        mark: Some(mark),
    };
    ring_behind(bell, m, pending)
}

/// On the maker thread: make busy notifier `h`'s bell, then ring for `p` (a failure abandons
/// it, its signal dropped on custream's host thread, where Python may be entered).
fn make_bell_and_ring(h: StreamHandle, p: Parked) {
    let ctx = {
        let guard = busy();
        let b = guard.as_ref().and_then(|m| m.get(&h.as_u64()));
        b.expect("a notifier ringing for a parked wait stays busy")
            .notifier
            .context
    };
    let made = make_stream(ctx).map(|bell| {
        let mut guard = busy();
        let b = guard.as_mut().and_then(|m| m.get_mut(&h.as_u64()));
        b.expect("a notifier ringing for a parked wait stays busy")
            .notifier
            .bell = Some(bell);
    });
    let rung = match made {
        Ok(()) => step(h, p),
        Err(e) => Err((e, p.pending(h))),
    };
    match rung {
        Ok(Some(reached)) => reached.give(),
        Ok(None) => {}
        Err((_, pending)) => {
            let signal = pending.fail();
            host::thread::post(Box::new(move |py| {
                signal.abandon(py);
                After::Nothing
            }));
        }
    }
}

impl Parked {
    fn pending(self, h: StreamHandle) -> Pending {
        Pending {
            signal: self.signal,
            owner: Owner::Busy(h),
            mark: Some(self.mark),
        }
    }
}

/// The next parked wait `p` of busy notifier `h`: reached already (its pending, to give), or
/// rung for on the bell.
fn step(h: StreamHandle, p: Parked) -> Result<Option<Pending>, (DriverError, Pending)> {
    match driver::event_query(p.mark.handle()) {
        Ok(true) => Ok(Some(p.pending(h))),
        Ok(false) => ring_parked(h, p).map(|()| None),
        Err(e) => Err((e, p.pending(h))),
    }
}

/// On custream's host thread, after busy notifier `h` rang: `step` for the next parked wait,
/// its driver calls without the GIL, which the thread holds for its Python jobs.
fn advance(py: Option<Python<'_>>, h: StreamHandle, p: Parked) {
    let stepped = match py {
        Some(py) => gil::detach(py, move || step(h, p)),
        None => step(h, p),
    };
    match stepped {
        Ok(Some(reached)) => reached.give(),
        Ok(None) => {}
        Err((_, pending)) => pending.fail().abandon(py),
    }
}

/// What a notifier waits behind for a thread's stream wait: the work queued so far on a live
/// stream of the notifier's context, recorded on the notifier's own event.
pub fn queue_behind_stream(n: Notifier, h: StreamHandle, signal: Wake) -> Result<(), (DriverError, Wake)> {
    let own = n.event.handle();
    let ns = n.stream.handle();
    if let Err(e) = driver::event_record(own, h) {
        put_back(n);
        return Err((e, signal));
    }
    PENDING.fetch_add(1, Ordering::AcqRel);
    let pending = Pending {
        signal,
        owner: Owner::Alone(Box::new(n)),
        mark: None,
    };
    ring_behind(ns, own, pending).map_err(|(e, p)| (e, p.fail()))
}
