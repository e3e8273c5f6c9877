//! A StreamPool's leases: which of its streams a lease holds, the waits for a free one, and
//! the streams being made; and `custream.Lease`, the context manager `pool.lease()` returns.
//!
//! The bookkeeping is one `Mutex` and one `Condvar` (`Leases`), never the GIL: the module is
//! `gil_used = false`. The mutex is held for a few loads and stores at a time, never across a
//! driver or Python call, so a thread attached to the interpreter may take it. A thread that
//! must wait (every stream of its tier leased, or the one it wants being made by another
//! thread) waits on the condvar inside `deadline::wait_or`'s slices, with the GIL let go and
//! signal handlers run between slices. A free stream is claimed under the mutex, so exactly
//! one waiter gets it. Closing the pool refuses new leases at once, wakes the waiters with an
//! error, and leaves the streams to the last lease given back (or stream made) after it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use pyo3::exceptions::{PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::closable::{self, Closable};
use crate::deadline::{self, Deadline};

/// What the pool's mutex guards.
struct State {
    closed: bool,
    /// By tier, by slot: held by a lease.
    leased: Vec<Box<[bool]>>,
    /// By tier, by slot: its stream is being made by some thread.
    making: Vec<Box<[bool]>>,
    /// Leases held and streams being made: what the pool's streams wait for after close().
    busy: usize,
    /// Threads waiting on the condvar: a change is signalled only when there is one (a
    /// notification is a system call, whoever waits or not).
    waiting: usize,
}

/// The leases of a pool of `tiers` tiers of `size` streams each.
pub struct Leases {
    state: Mutex<State>,
    changed: Condvar,
}

/// What `give_back`, `made` and `close` tell the pool: whether the pool's streams are to be
/// closed now, by the caller (the pool was closed and nothing is busy any more).
#[must_use]
pub struct CloseNow(pub bool);

/// Whether a slot's stream is made already (the pool's slots answer).
pub trait Made: Sync {
    fn is_made(&self, tier: usize, slot: usize) -> bool;
}

impl Leases {
    pub fn new(tiers: usize, size: usize) -> Leases {
        let flags = || (0..tiers).map(|_| vec![false; size].into_boxed_slice()).collect();
        Leases {
            state: Mutex::new(State {
                closed: false,
                leased: flags(),
                making: flags(),
                busy: 0,
                waiting: 0,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claim a free slot of `tier` for a lease, waiting until one is given back (GIL let go,
    /// signals looked at every slice) or `deadline`. A slot whose stream is made already comes
    /// first, the lowest index first. Errors: the pool is closed (at once, or while waiting),
    /// the deadline passed (`TimeoutError`), a signal handler's exception.
    pub fn claim(
        &self,
        py: Python<'_>,
        tier: usize,
        made: &dyn Made,
        deadline: Deadline,
        describe_tier: impl Fn() -> String,
    ) -> PyResult<usize> {
        let try_claim = |state: &mut State| -> PyResult<Option<usize>> {
            if state.closed {
                return Err(closed_error("lease()"));
            }
            let leased = &mut state.leased[tier];
            let free = |i: &usize| !leased[*i];
            let pick = (0..leased.len())
                .filter(free)
                .find(|&i| made.is_made(tier, i))
                .or_else(|| (0..leased.len()).find(free));
            if let Some(i) = pick {
                leased[i] = true;
                state.busy += 1;
            }
            Ok(pick)
        };
        if let Some(i) = try_claim(&mut self.lock())? {
            return Ok(i);
        }
        let mut claimed = None;
        let expired = || {
            PyTimeoutError::new_err(format!(
                "StreamPool.lease() timed out after {} s: every stream of {} is leased",
                deadline.seconds(),
                describe_tier()
            ))
        };
        deadline::wait_or(py, deadline, expired, |slice: Duration| {
            let mut state = self.lock();
            claimed = try_claim(&mut state)?;
            if claimed.is_none() {
                state = self.wait_a_slice(state, slice);
                claimed = try_claim(&mut state)?;
            }
            Ok(claimed.is_some())
        })?;
        Ok(claimed.expect("a claim ends the wait"))
    }

    /// Wait on the condvar for a change or `slice`, counted as waiting meanwhile.
    fn wait_a_slice<'a>(&self, mut state: MutexGuard<'a, State>, slice: Duration) -> MutexGuard<'a, State> {
        state.waiting += 1;
        let mut state = self
            .changed
            .wait_timeout(state, slice)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        state.waiting -= 1;
        state
    }

    /// Wake the waiters, if any, of a change made under `state` (dropped here).
    fn signal(&self, state: MutexGuard<'_, State>) {
        let anyone = state.waiting > 0;
        drop(state);
        if anyone {
            self.changed.notify_all();
        }
    }

    /// A lease of `tier`'s `slot` ends (or its stream could not be made).
    pub fn give_back(&self, tier: usize, slot: usize) -> CloseNow {
        let mut state = self.lock();
        state.leased[tier][slot] = false;
        self.unbusy(state)
    }

    fn unbusy(&self, mut state: MutexGuard<'_, State>) -> CloseNow {
        state.busy -= 1;
        let now = state.closed && state.busy == 0;
        self.signal(state);
        CloseNow(now)
    }

    /// Before making `tier`'s `slot`: true when the caller is to make it (it is marked being
    /// made, and counted busy until `made`), false once another thread has made it. Waits
    /// (GIL let go) while another thread makes it. Refused once the pool is closed.
    pub fn start_making(&self, py: Python<'_>, tier: usize, slot: usize, made: &dyn Made) -> PyResult<bool> {
        let mut decided = None;
        let mut decide = |state: &mut State| -> PyResult<bool> {
            if state.closed {
                return Err(closed_error("a stream of it"));
            }
            if made.is_made(tier, slot) {
                decided = Some(false);
            } else if !state.making[tier][slot] {
                state.making[tier][slot] = true;
                state.busy += 1;
                decided = Some(true);
            }
            Ok(decided.is_some())
        };
        if decide(&mut self.lock())? {
            return Ok(decided.unwrap_or(false));
        }
        deadline::wait(py, Deadline::NEVER, "StreamPool", |slice: Duration| {
            let mut state = self.lock();
            if decide(&mut state)? {
                return Ok(true);
            }
            state = self.wait_a_slice(state, slice);
            decide(&mut state)
        })?;
        Ok(decided.unwrap_or(false))
    }

    /// `tier`'s `slot` was made (stored in the pool's slots first), or failed.
    pub fn made(&self, tier: usize, slot: usize) -> CloseNow {
        let mut state = self.lock();
        state.making[tier][slot] = false;
        self.unbusy(state)
    }

    /// Refuse leases from now on and wake the waiters; true (close the streams now) when no
    /// lease is held and no stream is being made, else the last of those does. None when the
    /// pool was closed already.
    pub fn close(&self) -> Option<CloseNow> {
        let mut state = self.lock();
        if state.closed {
            return None;
        }
        state.closed = true;
        let now = state.busy == 0;
        self.signal(state);
        Some(CloseNow(now))
    }

    /// Leases held now (for repr and tests).
    pub fn held(&self) -> usize {
        self.lock()
            .leased
            .iter()
            .map(|t| t.iter().filter(|&&l| l).count())
            .sum()
    }
}

fn closed_error(what: &str) -> PyErr {
    PyValueError::new_err(format!("{what} on a closed custream.StreamPool"))
}

/// How a lease gives its stream back to its pool: src/pool.rs's, which this module does not
/// name (the pool uses this module, not the other way round).
pub type GiveBack = fn(Python<'_>, &Bound<'_, PyAny>, usize, usize) -> PyResult<()>;

/// One stream of a custream.StreamPool, held by one lease until it is given back.
///
/// ``pool.lease(*, priority=None, timeout=None)`` returns one; ``with pool.lease() as s:``
/// holds ``s`` for the block: no other lease gets it until the block ends (``pool.get()``,
/// round-robin, does not look at leases). Giving it back does not wait for the work queued on
/// it: the next holder's work follows it in stream order. After the block (or ``close()``)
/// the lease refuses to be used (ValueError); the stream stays the pool's.
#[pyclass(module = "custream", frozen)]
pub struct Lease {
    stream: Py<PyAny>,
    pool: Py<PyAny>,
    tier: usize,
    slot: usize,
    priority: i32,
    ended: AtomicBool,
    give_back: GiveBack,
}

impl Lease {
    pub fn new(
        stream: Py<PyAny>,
        pool: Py<PyAny>,
        tier: usize,
        slot: usize,
        priority: i32,
        give_back: GiveBack,
    ) -> Lease {
        Lease {
            stream,
            pool,
            tier,
            slot,
            priority,
            ended: AtomicBool::new(false),
            give_back,
        }
    }

    fn ensure_held(&self, what: &str) -> PyResult<()> {
        if self.ended.load(Ordering::Acquire) {
            return Err(PyValueError::new_err(format!(
                "{what} on a custream.Lease that was given back (its with block ended, or it was \
                 closed): lease again with pool.lease()"
            )));
        }
        Ok(())
    }
}

#[pymethods]
impl Lease {
    /// The leased stream, while the lease is held.
    #[getter]
    fn stream<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.ensure_held("stream")?;
        Ok(self.stream.bind(py).clone())
    }

    /// The priority of the pool's tier the stream comes from.
    #[getter]
    fn priority(&self) -> i32 {
        self.priority
    }

    /// True once the lease was given back.
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// Give the stream back to the pool now (what the end of the ``with`` block does);
    /// idempotent. Its queued work runs on.
    #[pyo3(name = "close")]
    fn py_close(&self, py: Python<'_>) -> PyResult<()> {
        Closable::close(self, py)
    }

    /// The leased stream.
    fn __enter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.ensure_held("__enter__()")?;
        Ok(self.stream.bind(py).clone())
    }

    /// Give the stream back; the block's exception, if any, propagates.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        exc: &Bound<'_, PyAny>,
        traceback: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let _ = (exc_type, exc, traceback);
        closable::exit(self, py)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let state = if self.is_closed() { "given back" } else { "held" };
        let handle = self
            .stream
            .bind(py)
            .getattr("handle")
            .map(|h| format!("{:#x}", h.extract::<u64>().unwrap_or(0)))
            .unwrap_or_else(|_| "closed".to_owned());
        format!("<custream.Lease of stream {handle} priority={} {state}>", self.priority)
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<Py<PyType>> {
        closable::reduce(slf)
    }
}

impl Closable for Lease {
    const PICKLE: &'static str = "a lease holds a CUDA stream of this process's pool";

    fn is_closed(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.ended.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        (self.give_back)(py, self.pool.bind(py), self.tier, self.slot)
    }
}

impl Drop for Lease {
    /// A lease dropped while held gives its stream back.
    fn drop(&mut self) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            let _ = Python::try_attach(|py| (self.give_back)(py, self.pool.bind(py), self.tier, self.slot));
        }
    }
}
