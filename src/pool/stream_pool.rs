//! What a custream.StreamPool is: tiers of owned streams, one per priority, each of `size`
//! streams made on first use, handed out round-robin (`get()`) or leased, one holder at a
//! time (`lease()`, src/pool/lease.rs), for code that wants a fresh-looking stream per task
//! without paying a create each time (rmm's `cuda_stream_pool`, PyTorch's internal pool).
//! Its Python methods are the one `#[pymethods]` block here.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList, PyTuple, PyType};

use crate::cpython::args::{bool_arg, device_arg, i32_arg, int_repr, is_int_not_bool, short_repr, Signature};
use crate::cpython::boundary::{sole_reference, ObjectCell};
use crate::cpython::interrupt::{timeout_arg, Deadline};
use crate::cpython::raw_call::{hand_built_method, Fastcall};
use crate::cpython::stream_object::StreamObject;
use crate::driver::{self, CaptureMode, CaptureModeScope, SyncPolicy};
use crate::green::{self, green_context_arg, GreenContext};
use crate::object::closable::{self, Closable};
use crate::object::make;
use crate::pool::lease::{CloseNow, Lease, Leases};
use crate::waits::notifiers;

/// The most streams one pool makes: far above any use (rmm's default is 16), low enough
/// that a typo does not try to make millions.
const MAX_SIZE: usize = 1 << 16;

/// The streams of one priority: made on first use, each once.
struct Tier {
    priority: i32,
    /// `priority` as a Python int: CPython keeps one object of each small int (-5 to 256),
    /// so `get(priority=-1)` passes this very object, found by an identity test.
    int: Py<PyAny>,
    slots: Box<[OnceLock<Py<PyAny>>]>,
    /// `get()`'s round-robin counter.
    next: AtomicUsize,
}

/// Tiers of owned streams, one per priority, made on first use, handed out round-robin or
/// leased.
///
/// ``StreamPool(size, *, device=None, non_blocking=True, priority=0, priorities=None,
/// green_context=None, sync_policy=None)`` holds ``size`` streams of each priority in
/// ``priorities`` (or of the one ``priority``), in ``device``'s primary context (default: the
/// current context's device, else 0), or in ``green_context`` (a custream.GreenContext) when
/// given; each made with ``sync_policy`` ('auto', 'spin', 'yield' or 'blocking', as
/// ``Stream.sync_policy``) when given. No stream is made
/// (and no context touched) until one is asked for; the priorities are checked against the
/// device's range then, as ``Stream()`` checks its own (CudaError).
/// ``get(priority=None)`` hands a tier's streams out in turn (thread-safe, no lock);
/// ``lease(priority=None, timeout=None)`` holds one that no other lease gets until its block
/// ends, waiting (GIL released, Ctrl-C ends it) while all are leased. Without ``priority``
/// both take the first tier given. ``pool[i]`` and ``len(pool)`` index every stream, tier
/// after tier. A pool's stream is a plain custream.Stream to every consumer; it stays valid
/// while the pool is open, and only ``pool.close()`` (idempotent) closes it, once every lease
/// is given back.
#[pyclass(module = "custream", frozen)]
pub struct StreamPool {
    tiers: Box<[Tier]>,
    size: usize,
    closed: AtomicBool,
    device: i32,
    non_blocking: bool,
    green: Option<Py<GreenContext>>,
    /// `sync_policy=`: set on each stream as it is made.
    sync_policy: Option<SyncPolicy>,
    /// The priorities were checked against the device's range (once, before the first stream).
    checked: AtomicBool,
    leases: Leases,
    /// By tier, then slot: the lease last given back by `close()` or `__exit__` (or none),
    /// handed out again by `lease()` when nothing else references it (`reuse`). Only the
    /// holder of the slot's lease touches its cell: the claim and the give-back (`Leases`,
    /// SeqCst) order the accesses of one holder before the next's.
    kept: Box<[ObjectCell]>,
}

impl StreamPool {
    /// Whether `tier`'s `slot` has its stream made already (`Leases::start_making` asks).
    pub(super) fn is_made(&self, tier: usize, slot: usize) -> bool {
        self.tiers[tier].slots[slot].get().is_some()
    }

    /// A pool with nothing made yet. `green`: made in that green context (non-blocking, on its
    /// device; checked by the caller). `device`: checked to exist (cheap calls: no context).
    pub fn new(
        py: Python<'_>,
        size: usize,
        device: Option<i32>,
        non_blocking: bool,
        priorities: Vec<i32>,
        green: Option<&Bound<'_, GreenContext>>,
        sync_policy: Option<SyncPolicy>,
    ) -> PyResult<Self> {
        let device = match green {
            Some(gc) if gc.get().is_closed() => {
                return Err(PyValueError::new_err("StreamPool() on a closed custream.GreenContext"));
            }
            Some(gc) => gc.get().device(),
            None => make::existing_device(device, driver::current_context()?)?,
        };
        let tiers: Box<[Tier]> = priorities
            .iter()
            .map(|&priority| Tier {
                priority,
                int: priority
                    .into_pyobject(py)
                    .map_or_else(|e| match e {}, |i| i.into_any().unbind()),
                slots: (0..size).map(|_| OnceLock::new()).collect(),
                next: AtomicUsize::new(0),
            })
            .collect();
        Ok(StreamPool {
            leases: Leases::new(tiers.len(), size),
            kept: (0..tiers.len() * size).map(|_| ObjectCell::new(None)).collect(),
            tiers,
            size,
            closed: AtomicBool::new(false),
            device,
            non_blocking,
            green: green.map(|g| g.clone().unbind()),
            sync_policy,
            checked: AtomicBool::new(false),
        })
    }

    fn ensure_open(&self, what: &str) -> PyResult<()> {
        if self.is_closed() {
            return Err(PyValueError::new_err(format!("{what} on a closed custream.StreamPool")));
        }
        Ok(())
    }

    /// The tier of `priority` (None: the first), for `fname`'s error.
    fn tier_of(&self, priority: Option<&Bound<'_, PyAny>>, fname: &str) -> PyResult<usize> {
        let Some(p) = priority.filter(|p| !p.is_none()) else {
            return Ok(0);
        };
        if !is_int_not_bool(p) {
            return Err(PyTypeError::new_err(format!(
                "{fname}() priority must be an int or None, got {}",
                p.get_type().name()?
            )));
        }
        let wanted = p.extract::<i32>().ok();
        self.tiers
            .iter()
            .position(|t| Some(t.priority) == wanted)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "{fname}() priority {} is not one of this pool's priorities {}",
                    int_repr(p),
                    self.priorities_text()
                ))
            })
    }

    /// The tier of `priority` when it is an int (not a subclass) of one of the tiers, else
    /// None (`tier_of` then says why): `get(priority=p)`'s fast path, no error made.
    #[inline]
    fn tier_of_int(&self, priority: &Borrowed<'_, '_, PyAny>) -> Option<usize> {
        if let Some(tier) = self.tiers.iter().position(|t| t.int.is(priority)) {
            return Some(tier);
        }
        if !priority.is_exact_instance_of::<PyInt>() {
            return None;
        }
        let wanted = priority.extract::<i64>().ok()?;
        self.tiers.iter().position(|t| i64::from(t.priority) == wanted)
    }

    fn priorities_text(&self) -> String {
        let all: Vec<String> = self.tiers.iter().map(|t| t.priority.to_string()).collect();
        if all.len() == 1 {
            format!("({},)", all[0])
        } else {
            format!("({})", all.join(", "))
        }
    }

    /// The stream of `tier`'s `slot`, made now if it was not.
    #[inline]
    fn stream_at<'py>(&self, py: Python<'py>, tier: usize, slot: usize) -> PyResult<Bound<'py, PyAny>> {
        match self.tiers[tier].slots[slot].get() {
            Some(s) => Ok(s.bind(py).clone()),
            None => self.make(py, tier, slot),
        }
    }

    /// Make `tier`'s `slot` (once, whichever thread comes first; the others wait for it).
    #[cold]
    #[inline(never)]
    fn make<'py>(&self, py: Python<'py>, tier: usize, slot: usize) -> PyResult<Bound<'py, PyAny>> {
        if self.leases.start_making(py, tier, slot, self)? {
            let made = self.make_stream(py, self.tiers[tier].priority);
            if let Ok(s) = &made {
                let _ = self.tiers[tier].slots[slot].set(s.clone().unbind());
            }
            self.after(py, self.leases.made(tier, slot, made.is_ok()))?;
            made?;
        }
        let s = self.tiers[tier].slots[slot]
            .get()
            .ok_or_else(|| PyValueError::new_err("a stream of this custream.StreamPool could not be made"))?;
        Ok(s.bind(py).clone())
    }

    /// One new stream of the pool. With the calling thread's capture mode relaxed, so that a
    /// stream made while this thread captures a graph does not invalidate the capture (as
    /// src/host/semaphores.rs registers its pages).
    fn make_stream<'py>(&self, py: Python<'py>, priority: i32) -> PyResult<Bound<'py, PyAny>> {
        let _relaxed = CaptureModeScope::enter(CaptureMode::Relaxed)?;
        self.check_priorities()?;
        let made = match &self.green {
            Some(gc) => green::create_stream(py, gc.bind(py), priority, true, "StreamPool()")?,
            None => make::create(py, Some(self.device), self.non_blocking, priority, true)?,
        };
        make::with_sync_policy(&made, self.sync_policy)?;
        notifiers::prepare(py, &made);
        Ok(made)
    }

    /// Before the first stream: every tier's priority against the device's range, refused as
    /// `Stream(priority=)` refuses one (CudaError naming the range). 0 is always in it.
    fn check_priorities(&self) -> PyResult<()> {
        if self.checked.load(Ordering::Acquire) || self.tiers.iter().all(|t| t.priority == 0) {
            return Ok(());
        }
        let range = driver::priority_range(self.device)?;
        for t in self.tiers.iter() {
            driver::check_priority(t.priority, range)?;
        }
        self.checked.store(true, Ordering::Release);
        Ok(())
    }

    /// Close the streams when the bookkeeping says so (the pool closed, nothing busy).
    #[inline]
    fn after(&self, py: Python<'_>, now: CloseNow) -> PyResult<()> {
        if now.0 {
            return self.close_streams(py);
        }
        Ok(())
    }

    /// Close every stream made; the first error is raised after all were closed.
    #[cold]
    fn close_streams(&self, py: Python<'_>) -> PyResult<()> {
        let mut first_error = None;
        for s in self.made_streams() {
            if let Err(e) = StreamObject::of(s.bind(py), "StreamPool").and_then(|s| s.close_pooled(py)) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn made_streams(&self) -> impl Iterator<Item = &Py<PyAny>> {
        self.tiers.iter().flat_map(|t| t.slots.iter().filter_map(OnceLock::get))
    }

    /// The next stream of `tier`, round-robin (thread-safe, no lock): one atomic add, once
    /// the stream is made. `get()`, and `Custream_PoolGet()` with tier 0.
    #[inline]
    pub fn get<'py>(&self, py: Python<'py>, tier: usize) -> PyResult<Bound<'py, PyAny>> {
        self.ensure_open("get()")?;
        let t = &self.tiers[tier];
        // Modulo the slots' own length: the index needs no bounds check.
        let i = t.next.fetch_add(1, Ordering::Relaxed) % t.slots.len();
        match t.slots[i].get() {
            Some(s) => Ok(s.bind(py).clone()),
            None => self.make(py, tier, i),
        }
    }

    /// A lease of one stream of `tier`, waiting until `deadline` for one (`lease()`).
    #[inline]
    fn lease<'py>(
        &self,
        py: Python<'py>,
        slf: &Bound<'py, StreamPool>,
        tier: usize,
        deadline: Deadline,
    ) -> PyResult<Bound<'py, Lease>> {
        self.ensure_open("lease()")?;
        let describe = || format!("priority {} ({} of them)", self.tiers[tier].priority, self.size);
        let slot = match self.leases.claim(py, tier, deadline, describe) {
            Ok(slot) => slot,
            Err(refused) => {
                self.after(py, refused.close_now)?;
                return Err(refused.error);
            }
        };
        if let Some(lease) = self.reuse(py, slf, tier, slot) {
            return Ok(lease);
        }
        let stream = match self.stream_at(py, tier, slot) {
            Ok(s) => s,
            Err(e) => {
                self.after(py, self.leases.give_back(tier, slot))?;
                return Err(e);
            }
        };
        let lease = Lease::new(
            stream.unbind(),
            slf.clone().unbind(),
            tier,
            slot,
            self.tiers[tier].priority,
        );
        Bound::new(py, lease)
    }

    /// The lease kept for `tier`'s `slot` (just claimed by the caller), held again, when
    /// nothing but the pool references it: no one can see that it is the same object. Saves
    /// a lease's allocation, initialization and deallocation (a quarter of what a `with
    /// pool.lease():` costs: docs/design.md, "The unsafe boundary"). Not on a free-threaded
    /// build, where a reference count read by one thread may be changing in another.
    #[inline]
    fn reuse<'py>(
        &self,
        py: Python<'py>,
        slf: &Bound<'py, StreamPool>,
        tier: usize,
        slot: usize,
    ) -> Option<Bound<'py, Lease>> {
        if cfg!(Py_GIL_DISABLED) {
            return None;
        }
        let lease = self.kept[tier * self.size + slot].take(py)?;
        if !sole_reference(&lease) {
            return None; // someone holds it still (ended: it refuses to be used); dropped here
        }
        let lease = lease.cast_into::<Lease>().ok()?;
        lease.get().hold_again(py, slf.clone());
        Some(lease)
    }

    /// Keep `lease`, just given back, for `reuse` (the caller still holds `tier`'s `slot`).
    fn keep(&self, py: Python<'_>, tier: usize, slot: usize, lease: &Bound<'_, Lease>) {
        if cfg!(Py_GIL_DISABLED) {
            return;
        }
        drop(self.kept[tier * self.size + slot].replace(py, Some(lease.clone().into_any())));
    }

    /// A lease of `slot` in `tier` ends (`Lease`'s give-back: src/pool/lease.rs): `lease` is kept
    /// for reuse before the slot is free for the next claim.
    pub(super) fn give_back(
        py: Python<'_>,
        pool: &Bound<'_, PyAny>,
        tier: usize,
        slot: usize,
        lease: Option<&Bound<'_, Lease>>,
    ) -> PyResult<()> {
        let pool = pool.cast::<StreamPool>()?.get();
        if let Some(lease) = lease {
            pool.keep(py, tier, slot, lease);
        }
        pool.after(py, pool.leases.give_back(tier, slot))
    }
}

static GET_SIG: Signature = Signature {
    name: "get",
    positional: &[],
    keyword_only: &["priority"],
    required: 0,
};

/// `pool.get(*, priority=None)`, built by hand (`get_descriptor`): a call without arguments
/// skips pyo3's argument extraction.
fn get_method(pool: &Bound<'_, StreamPool>, args: Option<Fastcall<'_, '_>>) -> PyResult<Py<PyAny>> {
    let py = pool.py();
    let pool = pool.get();
    let tier = match args {
        None => 0,
        Some(args) => match args
            .only_keyword(intern!(py, "priority"))
            .and_then(|p| pool.tier_of_int(&p))
        {
            Some(tier) => tier,
            None => {
                let [priority] = GET_SIG.parse_fastcall::<1>(&args)?;
                pool.tier_of(priority.as_ref(), "get")?
            }
        },
    };
    Ok(pool.get(py, tier)?.unbind())
}

static LEASE_SIG: Signature = Signature {
    name: "lease",
    positional: &[],
    keyword_only: &["priority", "timeout"],
    required: 0,
};

/// `pool.lease(*, priority=None, timeout=None)`, built by hand as `get` is, so that
/// `with pool.lease():` pays no argument extraction.
fn lease_method(pool: &Bound<'_, StreamPool>, args: Option<Fastcall<'_, '_>>) -> PyResult<Py<PyAny>> {
    let py = pool.py();
    let this = pool.get();
    let (tier, deadline) = match args {
        None => (0, Deadline::NEVER),
        Some(args) => match args
            .only_keyword(intern!(py, "priority"))
            .and_then(|p| this.tier_of_int(&p))
        {
            Some(tier) => (tier, Deadline::NEVER),
            None => {
                let [priority, timeout] = LEASE_SIG.parse_fastcall::<2>(&args)?;
                let tier = this.tier_of(priority.as_ref(), "lease")?;
                (tier, timeout_arg(timeout.as_ref(), "lease")?)
            }
        },
    };
    Ok(this.lease(py, pool, tier, deadline)?.into_any().unbind())
}

/// `priority=` or `priorities=` of StreamPool(): the tiers' priorities, in order.
fn priorities_arg(priority: Option<&Bound<'_, PyAny>>, priorities: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<i32>> {
    let priorities = priorities.filter(|p| !p.is_none());
    let Some(all) = priorities else {
        return Ok(vec![i32_arg(priority, "StreamPool", "priority", 0)?]);
    };
    if priority.is_some_and(|p| !p.is_none()) {
        return Err(PyTypeError::new_err(
            "StreamPool() takes priority (one tier) or priorities (several), not both",
        ));
    }
    if !(all.is_instance_of::<PyTuple>() || all.is_instance_of::<PyList>()) {
        return Err(PyTypeError::new_err(format!(
            "StreamPool() priorities must be a tuple or list of ints, got {}",
            all.get_type().name()?
        )));
    }
    let mut out: Vec<i32> = Vec::new();
    for p in all.try_iter()? {
        let p = p?;
        if !is_int_not_bool(&p) {
            return Err(PyTypeError::new_err(format!(
                "StreamPool() priorities must be ints, got {} ({})",
                p.get_type().name()?,
                short_repr(&p)
            )));
        }
        let v = p.extract::<i32>().map_err(|_| {
            PyValueError::new_err(format!(
                "StreamPool() priorities: {} is out of range: it must fit a 32-bit signed int",
                int_repr(&p)
            ))
        })?;
        if out.contains(&v) {
            return Err(PyValueError::new_err(format!(
                "StreamPool() priorities must be distinct, got {v} twice in {}",
                short_repr(all)
            )));
        }
        out.push(v);
    }
    if out.is_empty() {
        return Err(PyValueError::new_err(
            "StreamPool() priorities must hold at least one priority, got an empty sequence",
        ));
    }
    Ok(out)
}

#[pymethods]
impl StreamPool {
    #[new]
    #[pyo3(signature = (size, *, device = None, non_blocking = None, priority = None, priorities = None, green_context = None, sync_policy = None),
           text_signature = "(size, *, device=None, non_blocking=True, priority=0, priorities=None, green_context=None, sync_policy=None)")]
    fn py_new(
        size: &Bound<'_, PyAny>,
        device: Option<Bound<'_, PyAny>>,
        non_blocking: Option<Bound<'_, PyAny>>,
        priority: Option<Bound<'_, PyAny>>,
        priorities: Option<Bound<'_, PyAny>>,
        green_context: Option<Bound<'_, PyAny>>,
        sync_policy: Option<Bound<'_, PyAny>>,
    ) -> PyResult<StreamPool> {
        if !is_int_not_bool(size) {
            return Err(PyTypeError::new_err(format!(
                "StreamPool() size must be an int, got {}",
                size.get_type().name()?
            )));
        }
        let py = size.py();
        let size = size
            .extract::<i64>()
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=MAX_SIZE).contains(n))
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "StreamPool() size must be between 1 and {MAX_SIZE}, got {}",
                    int_repr(size)
                ))
            })?;
        let device = device_arg(device.as_ref(), "StreamPool")?;
        let non_blocking = bool_arg(non_blocking.as_ref(), "StreamPool", "non_blocking", true)?;
        let priorities = priorities_arg(priority.as_ref(), priorities.as_ref())?;
        if size * priorities.len() > MAX_SIZE {
            return Err(PyValueError::new_err(format!(
                "StreamPool() size {size} times {} priorities is more than {MAX_SIZE} streams",
                priorities.len()
            )));
        }
        let green = green_context_arg(green_context.as_ref(), "StreamPool", device, non_blocking)?;
        let sync_policy = make::sync_policy_arg(sync_policy.as_ref(), "StreamPool")?;
        StreamPool::new(py, size, device, non_blocking, priorities, green.as_ref(), sync_policy)
    }

    /// `pool[index]`, negative indices counting from the end: every stream, tier after tier.
    pub fn __getitem__<'py>(&self, py: Python<'py>, index: isize) -> PyResult<Bound<'py, PyAny>> {
        self.ensure_open("pool[i]")?;
        let len = self.__len__();
        let at = if index < 0 {
            len.checked_sub(index.unsigned_abs())
        } else {
            Some(index.unsigned_abs())
        };
        match at.filter(|&i| i < len) {
            Some(i) => self.stream_at(py, i / self.size, i % self.size),
            None => Err(PyIndexError::new_err(format!(
                "StreamPool index {index} out of range for a pool of {len}"
            ))),
        }
    }

    /// `get`, built by hand: `get_method`.
    #[classattr]
    #[pyo3(name = "get")]
    fn get_descriptor(py: Python<'_>) -> PyResult<Py<PyAny>> {
        hand_built_method!(
            py,
            StreamPool,
            c"get",
            get_method,
            c"get($self, /, *, priority=None)\n--\n\nThe next stream of the tier of ``priority`` (None: the first tier given),\nround-robin (thread-safe, no lock): one atomic add, once the stream is made. The\nsame stream may go to several callers; ``lease()`` holds one for one caller."
        )
    }

    /// `lease`, built by hand: `lease_method`.
    #[classattr]
    #[pyo3(name = "lease")]
    fn lease_descriptor(py: Python<'_>) -> PyResult<Py<PyAny>> {
        hand_built_method!(
            py,
            StreamPool,
            c"lease",
            lease_method,
            c"lease($self, /, *, priority=None, timeout=None)\n--\n\nA custream.Lease of one stream of the tier of ``priority`` (None: the first tier\ngiven) that no other lease holds until it is given back: ``with pool.lease() as s:``.\nWhen every stream of the tier is leased it waits, with the GIL released and Ctrl-C\nending the wait, until one is given back, or raises TimeoutError after ``timeout``\nseconds (None: no limit). A closed pool refuses at once (ValueError), and wakes\nwaiting leases with that error."
        )
    }

    /// Every stream of every tier: ``size`` times the number of priorities.
    pub fn __len__(&self) -> usize {
        self.size * self.tiers.len()
    }

    /// The device the pool's streams belong to.
    #[getter]
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The priority of each tier, in the order given.
    #[getter]
    fn priorities<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.tiers.iter().map(|t| t.priority))
    }

    fn __repr__(&self) -> String {
        let tiers = if self.tiers.len() == 1 && self.tiers[0].priority == 0 {
            String::new()
        } else {
            format!(" priorities={}", self.priorities_text())
        };
        let closed = if self.is_closed() { " closed" } else { "" };
        let held = match self.leases.held() {
            0 => String::new(),
            n => format!(" leased={n}"),
        };
        format!(
            "<custream.StreamPool size={} device={}{tiers}{held}{closed}>",
            self.size, self.device
        )
    }

    /// True once close() has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// Close the pool: refuse ``get()`` and new leases at once, and close every stream once
    /// the last lease is given back (now, when none is held); idempotent.
    #[pyo3(name = "close")]
    fn py_close(&self, py: Python<'_>) -> PyResult<()> {
        Closable::close(self, py)
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<Py<PyType>> {
        closable::reduce(slf)
    }
}

impl Closable for StreamPool {
    const PICKLE: &'static str = "CUDA streams belong to one process";

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Refuse new work at once; close every stream now, or after the last lease.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.closed.store(true, Ordering::Release);
        match self.leases.close() {
            Some(now) => self.after(py, now),
            None => Ok(()),
        }
    }
}

impl Drop for StreamPool {
    /// A pool dropped without close() closes its streams as close() would: a stream
    /// outliving its pool is not valid (it may still be referenced elsewhere). No lease is
    /// held then: a lease keeps its pool alive.
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::AcqRel) && self.leases.close().is_some() {
            let _ = Python::try_attach(|py| {
                for s in self.made_streams() {
                    let _ = StreamObject::of(s.bind(py), "StreamPool").and_then(|s| s.close_pooled(py));
                }
            });
        }
    }
}
