//! Launches that can wait for room in a stream's full queue, made so that Ctrl-C still ends
//! them on the main thread.
//!
//! The driver holds a stream's pending work in a queue of fixed size; a launch (a record, a
//! wait, a host function, a graph, a memory operation) made while it is full waits inside the
//! driver until the GPU retires the oldest entries, which takes as long as the work at the head
//! runs. No signal ends that wait, and Python runs a signal's handler only once the main thread
//! is back from the driver. So custream keeps an estimate of how deep a stream's queue is, and
//! on the main thread a launch into a deep one is handed to a thread of custream's own (a
//! *launcher*) while the caller waits for it in slices (src/cpython/interrupt.rs), running
//! signal handlers between them: a handler's exception ends the wait, and the launch goes on
//! without its caller, as the launch a handler interrupts after it returned would.
//!
//! The estimate: each launch counts itself in the stream's `reserved` word
//! (src/object/memory.rs's `launches`), and every `CHECKPOINT` launches custream records a
//! *probe*, an event of its own, on the stream. At a checkpoint whose last probe is done, fewer
//! than `CHECKPOINT` launches were pending when it completed, so fewer than `2 * CHECKPOINT`
//! are until the next checkpoint: far from the queue's size, and launches go straight to the
//! driver (one atomic load and store beside the driver call). A probe still pending makes the
//! stream deep: from then on every launch looks at the probe again, and on the main thread goes
//! through a launcher until the probe is done. What other libraries launch on the stream is not
//! counted; custream sees it only through its probes. No probe is recorded or asked about while
//! the stream captures (the capture has no queue, and the probe would be a node of its graph)
//! or while a capture of custream's is open anywhere, and each driver call for a probe runs
//! with the thread's capture mode relaxed, so that a capture another library runs is never
//! broken.
//!
//! A launch that outlives its caller keeps what it uses: a reference to each object and a use
//! of its lifecycle (src/object/lifecycle.rs), so a close() meanwhile takes effect when the launch
//! returns. Those uses end on custream's host-function thread (src/host/thread.rs), which
//! takes the GIL; a launcher never does.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use pyo3::prelude::*;

use crate::cpython::gil;
use crate::cpython::interrupt::{self, Deadline};
use crate::cpython::stream_object::StreamObject;
use crate::driver::capture_guard;
use crate::driver::gate;
use crate::driver::{self, CaptureMode, CaptureModeScope, CaptureStatus, Context, OwnedEvent, StreamHandle};
use crate::host::thread::{self, After};
use crate::object::lifecycle::{self, InUse, Managed};

/// Launches between probes. The driver's queue holds about a thousand launches per stream
/// (measured: benches/waits.py's queue rows); direct launches stop at twice this.
pub const CHECKPOINT: u32 = 128;

/// `CU_STREAM_PER_THREAD`: the calling thread's default stream.
const PER_THREAD: u64 = 2;

/// How the direct launch treats the GIL: held for a brief call (src/cpython/gil.rs), or let go.
#[derive(Clone, Copy)]
pub enum Gil {
    Brief,
    Detached,
}

/// Make the launch `f` on `stream`, whose handle `h` the caller holds open: to the driver
/// directly, or through a launcher on the main thread when the stream's queue is deep. `keep`
/// adds what `f` uses beside the stream to a `Keep` (false: one of them is being closed). An
/// error is the driver's, or a signal handler's exception, after which the launch still runs.
pub fn run(
    py: Python<'_>,
    stream: StreamObject<'_>,
    h: StreamHandle,
    gil_mode: Gil,
    keep: impl FnOnce(&mut Keep) -> bool,
    f: impl FnOnce() -> driver::Result<()> + Send + 'static,
) -> PyResult<()> {
    let count = stream.launches();
    let n = count.load(Ordering::Relaxed);
    if n < CHECKPOINT {
        // Relaxed and not a read-modify-write: a count lost to a race only moves the next
        // checkpoint by one.
        count.store(n + 1, Ordering::Relaxed);
        return Ok(direct(py, gil_mode, f)?);
    }
    if !deep(py, stream, h) {
        count.store(1, Ordering::Relaxed);
        return Ok(direct(py, gil_mode, f)?);
    }
    if !interrupt::on_main_thread() {
        // No handler runs here; the GIL goes, as for every call that can wait in the driver.
        return Ok(gil::detach(py, f)?);
    }
    let mut kept = Keep(Vec::new());
    if !kept.stream(py, stream) || !keep(&mut kept) {
        kept.end(py);
        return Ok(gil::detach(py, f)?);
    }
    hop(py, kept, f)
}

fn direct(py: Python<'_>, gil_mode: Gil, f: impl FnOnce() -> driver::Result<()> + Send) -> driver::Result<()> {
    match gil_mode {
        Gil::Brief => gil::brief(py, f),
        Gil::Detached => gil::detach(py, f),
    }
}

// ---- what a launch keeps ------------------------------------------------------------------

/// One object a launch uses: a reference, and a use of its lifecycle that `end` ends.
struct Held {
    obj: Py<PyAny>,
    end: fn(Python<'_>, &Bound<'_, PyAny>),
}

/// What a launch handed to a launcher keeps open until it returns.
pub struct Keep(Vec<Held>);

impl Keep {
    /// Hold `obj` open: `managed` is its lifecycle (borrowed from it), `end` ends the use kept
    /// here. False when it is being closed.
    pub fn hold<T: Managed>(
        &mut self,
        py: Python<'_>,
        obj: &Bound<'_, PyAny>,
        managed: &T,
        end: fn(Python<'_>, &Bound<'_, PyAny>),
    ) -> bool {
        let Some(in_use) = lifecycle::hold(managed, py) else {
            return false;
        };
        InUse::keep(in_use);
        self.0.push(Held {
            obj: obj.clone().unbind(),
            end,
        });
        true
    }

    fn stream(&mut self, py: Python<'_>, stream: StreamObject<'_>) -> bool {
        fn end(py: Python<'_>, obj: &Bound<'_, PyAny>) {
            if let Some(s) = StreamObject::cast(obj) {
                lifecycle::end_kept_use(&s, py);
            }
        }
        self.hold(py, &stream.object(py), &stream, end)
    }

    /// End the uses (a close() meanwhile is carried out here) and drop the references.
    fn end(self, py: Python<'_>) {
        for held in self.0 {
            (held.end)(py, held.obj.bind(py));
        }
    }
}

// ---- the probes ---------------------------------------------------------------------------

/// A stream's probe: an event of custream's in the context the stream's work runs in.
struct Probe {
    event: OwnedEvent,
    context: Context,
}

/// Probes by stream handle and context id (the default streams' handles are the same in every
/// context). Taken out while the driver is asked about them: no lock is held across a driver
/// call, which may let the GIL go.
static PROBES: Mutex<Option<HashMap<(u64, u64), Probe>>> = Mutex::new(None);

fn probes() -> std::sync::MutexGuard<'static, Option<HashMap<(u64, u64), Probe>>> {
    PROBES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The checkpoint: whether the stream's last probe is still pending. When it is not, a new
/// probe is recorded. Anything unusual (a capture, an error: the launch will say what) counts
/// as shallow, which is what every launch was before.
fn deep(py: Python<'_>, stream: StreamObject<'_>, h: StreamHandle) -> bool {
    if capture_guard::checks_needed() {
        return false;
    }
    let (context, context_id) = match probe_context(stream) {
        Ok(Some(found)) => found,
        _ => return false,
    };
    let key = (h.as_u64(), context_id);
    let probe = probes().get_or_insert_with(HashMap::new).remove(&key);
    let (looked, probe) = gil::brief(py, move || {
        let mut probe = probe;
        let looked = (|| -> driver::Result<bool> {
            let _relaxed = CaptureModeScope::enter(CaptureMode::Relaxed)?;
            if driver::stream_capture_status(h)? != CaptureStatus::None {
                return Ok(false);
            }
            match &probe {
                Some(p) if !driver::event_query(p.event.handle())? => return Ok(true),
                Some(_) => {}
                None => {
                    probe = Some(Probe {
                        event: driver::event_create(context, false)?,
                        context,
                    })
                }
            }
            if let Some(p) = &probe {
                driver::event_record(p.event.handle(), h)?;
            }
            Ok(false)
        })();
        (looked, probe)
    });
    if let Some(p) = probe {
        put_back(py, key, p);
    }
    looked.unwrap_or(false)
}

/// The context a stream's probe lives in, and its id: the stream's own, or for a default
/// stream the current one (the caller's `use_handle` made one current).
fn probe_context(stream: StreamObject<'_>) -> driver::Result<Option<(Context, u64)>> {
    if stream.handle_value() == PER_THREAD {
        // Each thread's own stream: one handle, no one probe.
        return Ok(None);
    }
    if stream.is_default() {
        return match driver::current_context()? {
            Some(ctx) => Ok(Some((ctx, driver::context_id(ctx)?))),
            None => Ok(None),
        };
    }
    Ok(match stream.known_context() {
        (Some(ctx), id) => Some((ctx, id)),
        (None, _) => None,
    })
}

fn put_back(py: Python<'_>, key: (u64, u64), probe: Probe) {
    let extra = probes().get_or_insert_with(HashMap::new).insert(key, probe);
    // Two threads at one checkpoint made a probe each: one is enough.
    if let Some(p) = extra {
        destroy(py, key.1, p);
    }
}

/// Destroy a probe of the context whose id is `context_id`, unless that context was reset
/// since (its events went with it, and a call into it could crash).
fn destroy(py: Python<'_>, context_id: u64, probe: Probe) {
    let Probe { event, context } = probe;
    let _ = gil::brief(py, move || {
        driver::ensure_same_context(context, context_id)?;
        event.destroy(context)
    });
}

/// The stream `handle` is being released: its probes go with it (every context's: a default
/// stream is never released).
pub fn forget(py: Python<'_>, handle: u64) {
    let gone: Vec<((u64, u64), Probe)> = {
        let mut probes = probes();
        let Some(map) = probes.as_mut().filter(|m| !m.is_empty()) else {
            return;
        };
        let keys: Vec<_> = map.keys().filter(|k| k.0 == handle).copied().collect();
        keys.into_iter().filter_map(|k| map.remove_entry(&k)).collect()
    };
    for (key, probe) in gone {
        destroy(py, key.1, probe);
    }
}

// ---- the hop --------------------------------------------------------------------------------

/// Where a handed-off launch stands.
enum Stage {
    Running,
    Done(driver::Result<()>, Keep),
    /// Its caller left (a signal handler raised); whoever finishes ends what it keeps.
    Abandoned,
    Taken,
}

struct Slot {
    stage: Mutex<Stage>,
    changed: Condvar,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Stage> {
        self.stage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// On the launcher: the launch returned.
    fn finish(&self, result: driver::Result<()>, kept: Keep) {
        let mut stage = self.lock();
        if matches!(*stage, Stage::Abandoned) {
            drop(stage);
            // The uses end where the GIL can be taken; once Python is gone they are left.
            thread::post(Box::new(move |py| {
                match py {
                    Some(py) => kept.end(py),
                    None => std::mem::forget(kept),
                }
                After::Nothing
            }));
            return;
        }
        *stage = Stage::Done(result, kept);
        self.changed.notify_all();
    }

    /// Wait up to `slice` for the launch; whether it returned.
    fn wait(&self, slice: Duration) -> bool {
        let stage = self.lock();
        let (stage, _) = self
            .changed
            .wait_timeout_while(stage, slice, |s| matches!(s, Stage::Running))
            .unwrap_or_else(PoisonError::into_inner);
        !matches!(*stage, Stage::Running)
    }

    /// The launch's answer, if it returned; else it is abandoned.
    fn take_or_abandon(&self) -> Option<(driver::Result<()>, Keep)> {
        let mut stage = self.lock();
        match std::mem::replace(&mut *stage, Stage::Taken) {
            Stage::Done(result, kept) => Some((result, kept)),
            _ => {
                *stage = Stage::Abandoned;
                None
            }
        }
    }
}

fn hop(py: Python<'_>, kept: Keep, f: impl FnOnce() -> driver::Result<()> + Send + 'static) -> PyResult<()> {
    let slot = Arc::new(Slot {
        stage: Mutex::new(Stage::Running),
        changed: Condvar::new(),
    });
    let job = launchers::Job {
        launch: Box::new(f),
        slot: Arc::clone(&slot),
        kept,
    };
    if let Err(job) = launchers::post(job) {
        // No thread to be had: the launch is made here, as before launchers.
        gil::detach(py, move || job.run());
    }
    let waited = interrupt::wait(py, Deadline::NEVER, "a launch", |slice| Ok(slot.wait(slice)));
    match slot.take_or_abandon() {
        Some((result, kept)) => {
            kept.end(py);
            waited?;
            Ok(result?)
        }
        // The handler's exception (NEVER has no deadline): the launch runs on.
        None => waited,
    }
}

/// The launcher threads: one per launch handed off at once (a launch stuck on one stream's
/// queue must not hold back another stream's, whose work may be what the first waits for),
/// idle ones kept for the next.
mod launchers {
    use super::*;

    pub struct Job {
        pub launch: Box<dyn FnOnce() -> driver::Result<()> + Send>,
        pub slot: Arc<Slot>,
        pub kept: Keep,
    }

    impl Job {
        pub fn run(self) {
            let Job { launch, slot, kept } = self;
            slot.finish(launch(), kept);
        }
    }

    /// Idle launchers' inboxes, and the fork generation they belong to (a forked child has
    /// none of its parent's threads).
    static IDLE: Mutex<(u32, Vec<Sender<Job>>)> = Mutex::new((0, Vec::new()));

    /// Hand `job` to an idle launcher, or a new one; the job back if no thread can be made.
    pub fn post(job: Job) -> Result<(), Job> {
        let generation = gate::fork_generation();
        let mut job = job;
        loop {
            let inbox = {
                let mut idle = IDLE.lock().unwrap_or_else(PoisonError::into_inner);
                if idle.0 != generation {
                    *idle = (generation, Vec::new());
                }
                idle.1.pop()
            };
            let Some(inbox) = inbox else { break };
            match inbox.send(job) {
                Ok(()) => return Ok(()),
                Err(back) => job = back.0,
            }
        }
        let (inbox, jobs) = channel::<Job>();
        let mine = inbox.clone();
        let spawned = std::thread::Builder::new()
            .name("custream-launch".into())
            .spawn(move || {
                for Job { launch, slot, kept } in jobs {
                    let result = launch();
                    // Idle again before the caller hears back, so that its next launch finds
                    // this thread rather than making another.
                    {
                        let mut idle = IDLE.lock().unwrap_or_else(PoisonError::into_inner);
                        if idle.0 == generation {
                            idle.1.push(mine.clone());
                        }
                    }
                    slot.finish(result, kept);
                }
            });
        match spawned {
            Ok(_) => inbox.send(job).map_err(|back| back.0),
            Err(_) => Err(job),
        }
    }
}
