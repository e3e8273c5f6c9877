//! Host semaphores: the words of mapped host memory ("flags" below; nothing to do with a
//! Stream's `CUSTREAM_FLAG_*` bits) that hold a stream while custream's own thread runs a
//! Python host function.
//!
//! `launch_host_func(f)` queues, in one driver call, a write that raises a "ready" flag once
//! the work before it is done, a wait until a "done" flag reads 1, and a write of 0 to it.
//! custream's thread watches the ready flag, runs `f` and raises the done flag, so work
//! queued after the call still waits for `f`; the GPU lowers it again, so a captured graph
//! (whose host node, not a ready flag, starts the call) replays. A flag is one 32-bit word of
//! host memory that every context maps for its GPU.
//!
//! The words live in pages of our own, registered with the driver per context (a context
//! reset by another library drops the registration, never our memory, so a late raise
//! writes to memory that is still ours). A raised flag is reused once it reads 0 again: the
//! GPU's write, the last operation on it, has run.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

use pyo3::Python;

use crate::cpython::gil;
use crate::driver::{self, CaptureMode, CaptureModeScope, Context};

/// Bytes in a page of flags: 16,384 words, page-aligned as registration wants.
const PAGE_BYTES: usize = 1 << 16;
const WORD: usize = std::mem::size_of::<AtomicU32>();

/// One flag: its word, as the host writes it, and the address the GPU reads it at.
pub struct Flag {
    word: &'static AtomicU32,
    device: u64,
    context_id: u64,
}

impl Flag {
    /// The address the stream's wait and write use.
    pub fn device_address(&self) -> u64 {
        self.device
    }

    /// Let the stream past its wait. Release: what the host function wrote to host memory
    /// is there before the GPU sees the flag.
    pub fn raise(&self) {
        self.word.store(1, Ordering::Release);
    }

    /// What raises the flag later, from a thread that does not own it.
    pub fn raiser(&self) -> Raiser {
        Raiser(self.word)
    }

    /// Whether the flag is up. Acquire: what the GPU wrote before it raised the flag (a
    /// stream's write, with its memory barrier) is visible after.
    pub fn is_raised(&self) -> bool {
        self.word.load(Ordering::Acquire) != 0
    }
}

/// Raises a flag whose owner keeps it (a host node's, held by its graph).
#[derive(Clone, Copy)]
pub struct Raiser(&'static AtomicU32);

impl Raiser {
    /// A raiser of a word of the tests' own (no driver: no page, no mapping).
    #[cfg(test)]
    pub fn of(word: &'static AtomicU32) -> Raiser {
        Raiser(word)
    }

    /// As `Flag::raise`.
    pub fn raise(self) {
        self.0.store(1, Ordering::Release);
    }
}

#[derive(Default)]
struct Pool {
    free: Vec<Flag>,
    /// Raised flags, free again once the GPU has lowered them.
    lowering: Vec<Flag>,
}

/// The pools of every context custream has queued Python host functions in, by context id.
static POOLS: Mutex<Option<HashMap<u64, Pool>>> = Mutex::new(None);

fn with_pool<R>(context_id: u64, f: impl FnOnce(&mut Pool) -> R) -> R {
    let mut pools = POOLS.lock().unwrap_or_else(PoisonError::into_inner);
    f(pools.get_or_insert_with(HashMap::new).entry(context_id).or_default())
}

/// A lowered flag for a stream of `ctx` (whose id is `context_id`), from the pool or from a
/// new page registered in `ctx` (without the GIL: registering is a driver call that can wait
/// on the driver's locks).
pub fn take(py: Python<'_>, ctx: Context, context_id: u64) -> driver::Result<Flag> {
    if let Some(flag) = reuse(context_id) {
        return Ok(flag);
    }
    let mut page = gil::detach(py, move || new_page(ctx, context_id))?;
    let flag = page.pop().expect("a page holds flags");
    with_pool(context_id, |pool| pool.free.append(&mut page));
    Ok(flag)
}

/// A free flag of context `context_id`'s pool, if any: one given back, or one raised that
/// the GPU has since lowered.
fn reuse(context_id: u64) -> Option<Flag> {
    with_pool(context_id, |pool| {
        if pool.free.is_empty() {
            let (lowered, raised) = std::mem::take(&mut pool.lowering)
                .into_iter()
                .partition(|f: &Flag| f.word.load(Ordering::Acquire) == 0);
            pool.free = lowered;
            pool.lowering = raised;
        }
        pool.free.pop()
    })
}

/// 4 KiB of words, page-aligned: a page of flags is `PAGE_BYTES / 4096` of them, one after
/// the other.
#[repr(C, align(4096))]
struct Chunk([AtomicU32; 4096 / WORD]);

fn new_page(ctx: Context, context_id: u64) -> driver::Result<Vec<Flag>> {
    // Zeroed words, page-aligned and never freed (on failure too: a registration may half
    // exist); the host accesses them only as atomics (the GPU's accesses are the driver's).
    let page: &'static [Chunk] = Box::leak(
        (0..PAGE_BYTES / size_of::<Chunk>())
            .map(|_| Chunk(std::array::from_fn(|_| AtomicU32::new(0))))
            .collect(),
    );
    // Registering is one of the calls a capture in "global" or "thread_local" mode takes as
    // unsafe, and the first page is often registered by a launch inside a capture: this
    // thread is relaxed for it, so no capture is invalidated.
    let _relaxed = CaptureModeScope::enter(CaptureMode::Relaxed)?;
    // SAFETY: the page is never freed (leaked above), and `PAGE_BYTES` long.
    let device = unsafe { driver::host_register_mapped(ctx, page.as_ptr().cast_mut().cast::<c_void>(), PAGE_BYTES) }?;
    Ok(page
        .iter()
        .flat_map(|chunk| chunk.0.iter())
        .enumerate()
        .map(|(i, word)| Flag {
            word,
            device: device + (i * WORD) as u64,
            context_id,
        })
        .collect())
}

/// A flag the stream was never told to wait on, or whose graph is gone: free now.
pub fn give_back(flag: Flag) {
    flag.word.store(0, Ordering::Relaxed);
    with_pool(flag.context_id, |pool| pool.free.push(flag));
}

/// A flag raised for a wait that the stream will follow with the write of 0: free once that
/// write has run. (One the stream never lowers, after a failed launch or a reset, is never
/// reused.)
pub fn give_back_raised(flag: Flag) {
    with_pool(flag.context_id, |pool| pool.lowering.push(flag));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flag of context `context_id` over a word of its own (a page's word, without the
    /// driver: reuse never registers anything). Each test uses context ids of its own, as
    /// the pools are the process's.
    fn flag(context_id: u64, device: u64) -> Flag {
        Flag {
            word: Box::leak(Box::new(AtomicU32::new(0))),
            device,
            context_id,
        }
    }

    #[test]
    fn a_flag_given_back_is_reused_lowered() {
        const CTX: u64 = u64::MAX - 1;
        assert!(reuse(CTX).is_none(), "a new context's pool is empty");
        let f = flag(CTX, 0x1000);
        f.raise();
        assert!(f.is_raised());
        give_back(f); // never waited on: free at once, lowered
        let again = reuse(CTX).expect("the flag given back");
        assert_eq!(again.device_address(), 0x1000);
        assert!(!again.is_raised());
        assert!(reuse(CTX).is_none(), "taken: not handed out twice");
    }

    #[test]
    fn a_raised_flag_is_reused_only_once_the_gpu_lowered_it() {
        const CTX: u64 = u64::MAX - 2;
        let f = flag(CTX, 0x2000);
        let raiser = f.raiser();
        raiser.raise();
        assert!(f.is_raised());
        let word = f.word;
        give_back_raised(f);
        assert!(
            reuse(CTX).is_none(),
            "still raised: the stream's write of 0 has not run"
        );
        word.store(0, Ordering::Release); // the GPU's write of 0
        assert_eq!(reuse(CTX).expect("lowered now").device_address(), 0x2000);
        assert!(reuse(CTX).is_none());
    }

    #[test]
    fn each_context_reuses_its_own_flags_and_lowered_ones_first_come_back() {
        const A: u64 = u64::MAX - 3;
        const B: u64 = u64::MAX - 4;
        give_back(flag(A, 0xA000));
        assert!(reuse(B).is_none(), "A's flag is mapped for A's GPU, not B's");
        let up = flag(A, 0xA004);
        up.raise();
        let down = flag(A, 0xA008);
        down.raise();
        let down_word = down.word;
        give_back_raised(up);
        give_back_raised(down);
        down_word.store(0, Ordering::Release);
        // The free one first; then, with none free, the lowered one, never the raised one.
        assert_eq!(reuse(A).map(|f| f.device_address()), Some(0xA000));
        assert_eq!(reuse(A).map(|f| f.device_address()), Some(0xA008));
        assert!(reuse(A).is_none(), "0xA004 is still raised");
    }
}
