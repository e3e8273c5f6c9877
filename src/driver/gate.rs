//! The process's state as custream sees it, in front of every driver call: whether cuInit
//! ran in this process (not only in a parent before a `fork()`), whether the interpreter is
//! finalizing, and whether the calling thread runs a host function. Atomics only: no driver
//! call and no Python here, so every folder may ask.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bumped in the child on every fork(): objects record it so a child never destroys, or
/// calls the deleter of, what its parent made.
static FORK_GENERATION: AtomicU32 = AtomicU32::new(0);
/// The generation in which cuInit succeeded; u32::MAX until then.
static INIT_GENERATION: AtomicU32 = AtomicU32::new(u32::MAX);
/// What stops the fast path of `driver::init`, in the one word it already loads: the
/// FINALIZING bit, and below it the number of host functions running now on any thread
/// (while one runs, every call takes the slow path, which refuses on that thread only).
static HALT: AtomicU32 = AtomicU32::new(0);
const FINALIZING: u32 = 1 << 31;

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Install the fork handler. Called once, when the extension module is initialized.
pub fn install_fork_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only bumps an atomic, safe in a forked child.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

pub fn fork_generation() -> u32 {
    FORK_GENERATION.load(Ordering::Acquire)
}

/// Called from an atexit hook: from here on no object calls into the driver. Sequentially
/// consistent, as is the count of host functions entering Python (src/host/functions.rs): one of
/// the two always sees the other.
pub fn set_finalizing() {
    HALT.fetch_or(FINALIZING, Ordering::SeqCst);
}

pub fn is_finalizing() -> bool {
    HALT.load(Ordering::SeqCst) & FINALIZING != 0
}

/// Whether cuInit may be called and was, and no host function runs: the three loads of
/// `driver::init`'s fast path.
#[inline]
pub fn initialized() -> bool {
    HALT.load(Ordering::Acquire) == 0 && initialized_here()
}

/// Whether cuInit succeeded in this process (not only in a parent before a fork).
pub fn initialized_here() -> bool {
    INIT_GENERATION.load(Ordering::Acquire) == fork_generation()
}

thread_local! {
    static IN_HOST_FUNCTION: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as running a host function (a driver thread running a callback
/// of `cuLaunchHostFunc`, or a user object's destructor) until dropped. CUDA forbids CUDA
/// calls there, so `driver::init` refuses them on this thread meanwhile.
pub struct HostFunctionScope(bool);

impl HostFunctionScope {
    pub fn enter() -> HostFunctionScope {
        HALT.fetch_add(1, Ordering::AcqRel);
        HostFunctionScope(IN_HOST_FUNCTION.with(|f| f.replace(true)))
    }
}

impl Drop for HostFunctionScope {
    fn drop(&mut self) {
        IN_HOST_FUNCTION.with(|f| f.set(self.0));
        HALT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether the calling thread is inside a host function.
pub fn in_host_function() -> bool {
    IN_HOST_FUNCTION.with(Cell::get)
}

/// What stands in the way of calling the driver in this process now, if anything.
pub enum Gate {
    Open,
    Forked,
    Finalizing,
}

/// Whether cuInit has yet to be called in this process (`Open`), or must never be.
pub fn gate() -> Gate {
    if is_finalizing() {
        return Gate::Finalizing;
    }
    match INIT_GENERATION.load(Ordering::Acquire) {
        u32::MAX => Gate::Open,
        g if g == fork_generation() => Gate::Open,
        _ => Gate::Forked,
    }
}

/// Record that cuInit succeeded in this process.
pub fn mark_initialized() {
    INIT_GENERATION.store(fork_generation(), Ordering::Release);
}
