//! A StreamPool's leases: which of its streams a lease holds, the waits for a free one, and
//! the streams being made; and `custream.Lease`, the context manager `pool.lease()` returns.
//!
//! A lease is claimed and given back without a lock: one bit per slot in atomic words, set by
//! a compare-and-swap (so exactly one claimer gets a slot) and cleared by the give-back. The
//! `Mutex` and `Condvar` of `Leases` are taken only to wait, to wake a waiter, to make a
//! stream, and to close: never on the way of a `with pool.lease():` that finds a free stream.
//! Nothing here uses the GIL (the module is `gil_used = false`); the mutex is held for a few
//! loads and stores at a time, never across a driver or Python call, so a thread attached to
//! the interpreter may take it. A thread that must wait (every stream of its tier leased, or
//! the one it wants being made by another thread) waits on the condvar inside
//! `interrupt::wait_or`'s slices, with the GIL let go and signal handlers run between slices.
//!
//! Two handshakes make the lock-free path sound, each a pair of SeqCst accesses in opposite
//! orders (so of any two threads, at least one sees the other's write):
//! - Close: a claim sets its bit, then reads `closed`; close sets `closed`, then reads the
//!   bits. A claim that sees the pool open is seen by close, which leaves the streams to the
//!   last give-back; a claim that sees it closed gives its slot back at once. A give-back
//!   clears its bit, then reads `closed`: if close read the bit set, the give-back sees
//!   `closed` and looks whether it was the last (`last_out`, under the mutex, which decides
//!   once).
//! - Waiting: a waiter counts itself in `waiting`, then looks at the bits (under the mutex)
//!   before it sleeps; a give-back clears its bit, then reads `waiting`, and when someone waits
//!   takes the mutex before notifying, so the notification cannot fall between a waiter's
//!   look and its sleep.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use pyo3::exceptions::{PyTimeoutError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyType};

use super::stream_pool::StreamPool;
use crate::cpython::args::Signature;
use crate::cpython::boundary::ObjectCell;
use crate::cpython::interrupt::{self, Deadline};
use crate::cpython::raw_call::{hand_built_method, Fastcall};
use crate::object::closable::{self, Closable};

/// Bits per word of a tier's flags.
const BITS: usize = u64::BITS as usize;

/// One flag per slot of each tier, in atomic words.
struct Flags {
    /// By tier, by word.
    words: Box<[Box<[AtomicU64]>]>,
}

impl Flags {
    fn new(tiers: usize, size: usize) -> Flags {
        let words = size.div_ceil(BITS);
        Flags {
            words: (0..tiers)
                .map(|_| (0..words).map(|_| AtomicU64::new(0)).collect())
                .collect(),
        }
    }

    fn of(&self, tier: usize) -> &[AtomicU64] {
        &self.words[tier]
    }

    fn count(&self) -> usize {
        let ones = |w: &AtomicU64| w.load(Ordering::SeqCst).count_ones() as usize;
        self.words.iter().flat_map(|t| t.iter()).map(ones).sum()
    }
}

/// The word and bit of `slot`.
fn bit_of(slot: usize) -> (usize, u64) {
    (slot / BITS, 1 << (slot % BITS))
}

/// What the mutex guards.
struct State {
    /// By tier, by slot: its stream is being made by some thread.
    making: Vec<Box<[bool]>>,
    /// Streams being made now.
    makers: usize,
    /// The pool's streams were handed to some caller to close (`CloseNow(true)`, once).
    done: bool,
}

/// The leases of a pool of `tiers` tiers of `size` streams each.
pub struct Leases {
    size: usize,
    /// Held by a lease (claimed by a compare-and-swap, cleared by the give-back).
    leased: Flags,
    /// Its stream is made: such a slot is leased first (set once, after the stream is stored).
    made: Flags,
    closed: AtomicBool,
    /// Threads waiting for a change (counted before they look, under the mutex): a give-back
    /// wakes them only when there is one (a notification is a system call, whoever waits or
    /// not).
    waiting: AtomicUsize,
    state: Mutex<State>,
    changed: Condvar,
}

/// What `give_back`, `made` and `close` tell the pool: whether the pool's streams are to be
/// closed now, by the caller (the pool was closed and nothing is busy any more).
#[must_use]
pub struct CloseNow(pub bool);

/// A lease refused: its error, and (when the refusal gave back a slot claimed as the pool
/// closed) whether the pool's streams are to be closed now.
pub struct Refused {
    pub error: PyErr,
    pub close_now: CloseNow,
}

impl From<PyErr> for Refused {
    fn from(error: PyErr) -> Refused {
        Refused {
            error,
            close_now: CloseNow(false),
        }
    }
}

/// The outcome of one look for a free slot.
enum Look {
    Claimed(usize),
    /// Every slot of the tier is held.
    None,
    /// The pool is closed (a slot claimed meanwhile was given back: `CloseNow`).
    Closed(CloseNow),
}

impl Leases {
    pub fn new(tiers: usize, size: usize) -> Leases {
        Leases {
            size,
            leased: Flags::new(tiers, size),
            made: Flags::new(tiers, size),
            closed: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            state: Mutex::new(State {
                making: (0..tiers).map(|_| vec![false; size].into_boxed_slice()).collect(),
                makers: 0,
                done: false,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slots of word `w` that exist (the last word of a tier may be partly past its end).
    fn valid(&self, w: usize) -> u64 {
        match self.size - w * BITS {
            n if n >= BITS => u64::MAX,
            n => (1 << n) - 1,
        }
    }

    /// Claim a free slot of `tier` without waiting, unless the pool is closed.
    fn look(&self, tier: usize) -> Look {
        let claimed = self.take_free(tier);
        // After the claim (the close handshake): a claim the close did not see gives way.
        if self.closed.load(Ordering::SeqCst) {
            return Look::Closed(match claimed {
                Some(slot) => self.give_back(tier, slot),
                None => CloseNow(false),
            });
        }
        claimed.map_or(Look::None, Look::Claimed)
    }

    /// Set the bit of a free slot of `tier`: a slot whose stream is made first, the lowest
    /// index first.
    #[inline]
    fn take_free(&self, tier: usize) -> Option<usize> {
        let made = self.made.of(tier);
        for only_made in [true, false] {
            for (w, word) in self.leased.of(tier).iter().enumerate() {
                let mut now = word.load(Ordering::Relaxed);
                loop {
                    let mut free = !now & self.valid(w);
                    if only_made {
                        free &= made[w].load(Ordering::Acquire);
                    }
                    if free == 0 {
                        break;
                    }
                    let bit = free & free.wrapping_neg();
                    // SeqCst: the close handshake (the module's comment).
                    match word.compare_exchange_weak(now, now | bit, Ordering::SeqCst, Ordering::Relaxed) {
                        Ok(_) => return Some(w * BITS + bit.trailing_zeros() as usize),
                        Err(seen) => now = seen,
                    }
                }
            }
        }
        None
    }

    /// Whether `tier` has a free slot, or the pool is closed: a waiter's look before it sleeps.
    fn worth_a_look(&self, tier: usize) -> bool {
        self.closed.load(Ordering::SeqCst)
            || self
                .leased
                .of(tier)
                .iter()
                .enumerate()
                .any(|(w, word)| !word.load(Ordering::SeqCst) & self.valid(w) != 0)
    }

    /// Claim a free slot of `tier` for a lease, waiting until one is given back (GIL let go,
    /// signals looked at every slice) or `deadline`. A slot whose stream is made already comes
    /// first, the lowest index first. Errors: the pool is closed (at once, or while waiting),
    /// the deadline passed (`TimeoutError`), a signal handler's exception.
    #[inline]
    pub fn claim(
        &self,
        py: Python<'_>,
        tier: usize,
        deadline: Deadline,
        describe_tier: impl Fn() -> String,
    ) -> Result<usize, Refused> {
        match self.look(tier) {
            Look::Claimed(slot) => Ok(slot),
            Look::Closed(close_now) => Err(refused(close_now)),
            Look::None => self.wait_for_one(py, tier, deadline, describe_tier),
        }
    }

    #[cold]
    #[inline(never)]
    fn wait_for_one(
        &self,
        py: Python<'_>,
        tier: usize,
        deadline: Deadline,
        describe_tier: impl Fn() -> String,
    ) -> Result<usize, Refused> {
        let mut outcome = Look::None;
        let expired = || {
            PyTimeoutError::new_err(format!(
                "StreamPool.lease() timed out after {} s: every stream of {} is leased",
                deadline.seconds(),
                describe_tier()
            ))
        };
        interrupt::wait_or(py, deadline, expired, |slice: Duration| {
            outcome = self.look(tier);
            if matches!(outcome, Look::None) {
                let state = self.lock();
                self.waiting.fetch_add(1, Ordering::SeqCst);
                let state = if self.worth_a_look(tier) {
                    state
                } else {
                    self.wait_a_slice(state, slice)
                };
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                drop(state);
                outcome = self.look(tier);
            }
            Ok(!matches!(outcome, Look::None))
        })?;
        match outcome {
            Look::Claimed(slot) => Ok(slot),
            Look::Closed(close_now) => Err(refused(close_now)),
            Look::None => unreachable!("a wait ends with a claim or the pool closed"),
        }
    }

    /// Wait on the condvar for a change or `slice`.
    fn wait_a_slice<'a>(&self, state: MutexGuard<'a, State>, slice: Duration) -> MutexGuard<'a, State> {
        self.changed
            .wait_timeout(state, slice)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    /// Wake the waiters, if any. Taking the mutex first: a waiter holds it from its last look
    /// to its sleep, so the notification comes after the sleep began, or before the look.
    fn signal(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            drop(self.lock());
            self.changed.notify_all();
        }
    }

    /// A lease of `tier`'s `slot` ends (or its stream could not be made).
    #[inline]
    pub fn give_back(&self, tier: usize, slot: usize) -> CloseNow {
        let (w, bit) = bit_of(slot);
        // SeqCst: both handshakes (the module's comment).
        self.leased.of(tier)[w].fetch_and(!bit, Ordering::SeqCst);
        self.signal();
        if self.closed.load(Ordering::SeqCst) {
            return self.last_out();
        }
        CloseNow(false)
    }

    /// Once the pool is closed: whether the caller is the one to close its streams (nothing is
    /// leased or being made, and no caller was told so before).
    #[cold]
    fn last_out(&self) -> CloseNow {
        let mut state = self.lock();
        if state.done || state.makers > 0 || self.leased.count() > 0 {
            return CloseNow(false);
        }
        state.done = true;
        CloseNow(true)
    }

    /// Before making `tier`'s `slot`: true when the caller is to make it (it is marked being
    /// made, and counted busy until `made`), false once another thread has made it. Waits
    /// (GIL let go) while another thread makes it. Refused once the pool is closed.
    pub fn start_making(&self, py: Python<'_>, tier: usize, slot: usize, pool: &StreamPool) -> PyResult<bool> {
        let mut decided = None;
        let mut decide = |state: &mut State| -> PyResult<bool> {
            if self.closed.load(Ordering::SeqCst) {
                return Err(closed_error("a stream of it"));
            }
            if pool.is_made(tier, slot) {
                decided = Some(false);
            } else if !state.making[tier][slot] {
                state.making[tier][slot] = true;
                state.makers += 1;
                decided = Some(true);
            }
            Ok(decided.is_some())
        };
        if decide(&mut self.lock())? {
            return Ok(decided.unwrap_or(false));
        }
        interrupt::wait(py, Deadline::NEVER, "StreamPool", |slice: Duration| {
            let mut state = self.lock();
            if decide(&mut state)? {
                return Ok(true);
            }
            self.waiting.fetch_add(1, Ordering::SeqCst);
            state = self.wait_a_slice(state, slice);
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            decide(&mut state)
        })?;
        Ok(decided.unwrap_or(false))
    }

    /// `tier`'s `slot` was made (`ok`: stored in the pool's slots first), or failed.
    pub fn made(&self, tier: usize, slot: usize, ok: bool) -> CloseNow {
        if ok {
            let (w, bit) = bit_of(slot);
            self.made.of(tier)[w].fetch_or(bit, Ordering::Release);
        }
        let mut state = self.lock();
        state.making[tier][slot] = false;
        state.makers -= 1;
        drop(state);
        self.signal();
        if self.closed.load(Ordering::SeqCst) {
            return self.last_out();
        }
        CloseNow(false)
    }

    /// Refuse leases from now on and wake the waiters; true (close the streams now) when no
    /// lease is held and no stream is being made, else the last of those does. None when the
    /// pool was closed already.
    pub fn close(&self) -> Option<CloseNow> {
        // SeqCst: the close handshake (the module's comment).
        if self.closed.swap(true, Ordering::SeqCst) {
            return None;
        }
        self.signal();
        Some(self.last_out())
    }

    /// Leases held now (for repr and tests).
    pub fn held(&self) -> usize {
        self.leased.count()
    }
}

fn closed_error(what: &str) -> PyErr {
    PyValueError::new_err(format!("{what} on a closed custream.StreamPool"))
}

fn refused(close_now: CloseNow) -> Refused {
    Refused {
        error: closed_error("lease()"),
        close_now,
    }
}

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
    /// The pool: held while the lease is held, none once it was given back (a lease the pool
    /// keeps for reuse must not keep the pool alive). Taken by whoever ends the lease (the
    /// winner of `ended`), put back only by `hold_again`.
    pool: ObjectCell,
    tier: usize,
    slot: usize,
    priority: i32,
    ended: AtomicBool,
}

impl Lease {
    pub fn new(stream: Py<PyAny>, pool: Py<StreamPool>, tier: usize, slot: usize, priority: i32) -> Lease {
        Lease {
            stream,
            pool: ObjectCell::new(Some(pool.into_any())),
            tier,
            slot,
            priority,
            ended: AtomicBool::new(false),
        }
    }

    /// Held again, by a new `pool.lease()`: a lease that was given back and that nothing but
    /// the pool references (`StreamPool::reuse`), so that no one can see it change.
    pub fn hold_again(&self, py: Python<'_>, pool: Bound<'_, StreamPool>) {
        drop(self.pool.replace(py, Some(pool.into_any())));
        self.ended.store(false, Ordering::Release);
    }

    /// End the lease (once): give its stream back, offering the pool `me` (this lease) to
    /// reuse.
    fn end(&self, py: Python<'_>, me: Option<&Bound<'_, Lease>>) -> PyResult<()> {
        if self.ended_before(py) {
            return Ok(());
        }
        let Some(pool) = self.pool.take(py) else {
            return Ok(());
        };
        StreamPool::give_back(py, &pool, self.tier, self.slot, me)
    }

    /// Mark the lease ended: whether it was already. One caller wins: where there is a GIL
    /// every caller holds it and none lets it go between the load and the store (a locked
    /// swap there cost a tenth of what a `with pool.lease():` adds to CPython's own `with`);
    /// on a free-threaded build, the swap.
    #[inline]
    fn ended_before(&self, _py: Python<'_>) -> bool {
        if cfg!(Py_GIL_DISABLED) {
            return self.ended.swap(true, Ordering::AcqRel);
        }
        let was = self.ended.load(Ordering::Acquire);
        self.ended.store(true, Ordering::Release);
        was
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
    fn py_close(slf: &Bound<'_, Self>) -> PyResult<()> {
        slf.get().end(slf.py(), Some(slf))
    }

    /// `__enter__`, built by hand: `enter_method`.
    #[classattr]
    #[pyo3(name = "__enter__")]
    fn enter_descriptor(py: Python<'_>) -> PyResult<Py<PyAny>> {
        hand_built_method!(
            py,
            Lease,
            c"__enter__",
            enter_method,
            c"__enter__($self, /)\n--\n\nThe leased stream."
        )
    }

    /// `__exit__`, built by hand: `exit_method`.
    #[classattr]
    #[pyo3(name = "__exit__")]
    fn exit_descriptor(py: Python<'_>) -> PyResult<Py<PyAny>> {
        hand_built_method!(
            py,
            Lease,
            c"__exit__",
            exit_method,
            c"__exit__($self, exc_type, exc, traceback)\n--\n\nGive the stream back; the block's exception, if any, propagates."
        )
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

static EXIT_SIG: Signature = Signature {
    name: "__exit__",
    positional: &["exc_type", "exc", "traceback"],
    keyword_only: &[],
    required: 3,
};

/// `lease.__enter__()`: the leased stream. Built by hand (`enter_descriptor`), as `__exit__`:
/// pyo3's methods parse their arguments and count the call in pyo3's own bookkeeping, which
/// was most of what a `with pool.lease():` cost beyond CPython's own `with`.
fn enter_method(lease: &Bound<'_, Lease>, args: Option<Fastcall<'_, '_>>) -> PyResult<Py<PyAny>> {
    if let Some(args) = args.filter(|a| !a.is_empty()) {
        let given = args.positional().len() + args.keywords().len();
        return Err(PyTypeError::new_err(format!(
            "__enter__() takes no arguments ({given} given)"
        )));
    }
    let this = lease.get();
    this.ensure_held("__enter__()")?;
    Ok(this.stream.clone_ref(lease.py()))
}

/// `lease.__exit__(exc_type, exc, traceback)`: give the stream back; False, so that the
/// block's exception, if any, propagates.
fn exit_method(lease: &Bound<'_, Lease>, args: Option<Fastcall<'_, '_>>) -> PyResult<Py<PyAny>> {
    let py = lease.py();
    // The `with` statement passes three positional arguments: nothing to look at.
    match args {
        Some(args) if args.is_positional(3) => {}
        Some(args) => drop(EXIT_SIG.parse_fastcall::<3>(&args)?),
        None => return Err(PyTypeError::new_err("__exit__() missing required argument 'exc_type'")),
    }
    lease.get().end(py, Some(lease))?;
    Ok(PyBool::new(py, false).to_owned().into_any().unbind())
}

impl Closable for Lease {
    const PICKLE: &'static str = "a lease holds a CUDA stream of this process's pool";

    fn is_closed(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.end(py, None)
    }
}

impl Drop for Lease {
    /// A lease dropped while held gives its stream back.
    fn drop(&mut self) {
        let held = !std::mem::replace(self.ended.get_mut(), true);
        if self.pool.is_empty() {
            return;
        }
        let _ = Python::try_attach(|py| {
            if let Some(pool) = self.pool.take(py) {
                if held {
                    let _ = StreamPool::give_back(py, &pool, self.tier, self.slot, None);
                }
            }
        });
    }
}
