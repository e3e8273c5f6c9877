//! Giving back a borrowed stream's reference to its owner, bounded in stack depth.
//!
//! Dropping an owner can deallocate it, and an owner may be another Stream with an owner of
//! its own: a chain of 100k streams would recurse 100k deep and overflow the C stack.
//! CPython's trashcan, which bounds this for its own types, is not in the limited API, so
//! the same is done here: past a nesting depth the release is queued, and the outermost
//! release on the thread drains the queue.

use std::cell::{Cell, RefCell};

use pyo3::prelude::*;

use crate::cpython::stream_object::Owned;

/// How many owner releases may nest on one thread before further ones are queued.
const NESTING_LIMIT: u32 = 50;

thread_local! {
    static NESTING: Cell<u32> = const { Cell::new(0) };
    static QUEUED: RefCell<Vec<Py<PyAny>>> = const { RefCell::new(Vec::new()) };
}

/// Give up `owner`, the strong reference a Stream held; the GIL is held (`py`).
pub fn release(py: Python<'_>, owner: Owned) {
    release_reference(py, owner.into_bound(py).unbind());
}

/// Drop `owner` now, or queue it past the nesting limit: the drop may run a deallocation
/// that releases another owner, and so on down a chain.
fn release_reference(py: Python<'_>, owner: Py<PyAny>) {
    let depth = NESTING.with(Cell::get);
    if depth >= NESTING_LIMIT {
        QUEUED.with(|q| q.borrow_mut().push(owner));
        return;
    }
    NESTING.with(|d| d.set(depth + 1));
    drop(owner.into_bound(py));
    if depth == 0 {
        // No borrow is held across the drop: it may queue more.
        while let Some(next) = QUEUED.with(|q| q.borrow_mut().pop()) {
            drop(next.into_bound(py));
        }
    }
    NESTING.with(|d| d.set(depth));
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

    use super::*;

    static DROPPED: AtomicUsize = AtomicUsize::new(0);
    static DEEPEST: AtomicU32 = AtomicU32::new(0);

    /// One link of a chain of owners, as a Stream whose owner is another Stream: dropping it
    /// releases the next link through `release_reference`, as a Stream's deallocation does.
    #[pyclass]
    struct Link {
        next: Option<Py<PyAny>>,
    }

    impl Drop for Link {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Ordering::SeqCst);
            DEEPEST.fetch_max(NESTING.with(Cell::get), Ordering::SeqCst);
            if let Some(next) = self.next.take() {
                Python::attach(|py| release_reference(py, next));
            }
        }
    }

    fn chain(py: Python<'_>, n: usize) -> Py<PyAny> {
        let mut head = None;
        for _ in 0..n {
            head = Some(Py::new(py, Link { next: head }).expect("a link").into_any());
        }
        head.expect("n > 0")
    }

    /// The one test of this module (both statics are counted across it): a long chain is
    /// released with the nesting bounded, every link once, and the thread left as it was.
    #[test]
    fn a_chain_of_owners_is_released_once_each_without_deep_recursion() {
        Python::initialize();
        // 100k nested deallocations overflow a test thread's 2 MiB stack many times over:
        // without the bound this test crashes.
        const N: usize = 100_000;
        Python::attach(|py| {
            let head = chain(py, N);
            assert_eq!(DROPPED.load(Ordering::SeqCst), 0);
            release_reference(py, head);
            assert_eq!(DROPPED.load(Ordering::SeqCst), N, "every link released, once");
            assert!(DEEPEST.load(Ordering::SeqCst) <= NESTING_LIMIT, "nesting bounded");
            assert_eq!(DEEPEST.load(Ordering::SeqCst), NESTING_LIMIT, "the limit was reached");
            assert_eq!(NESTING.with(Cell::get), 0);
            assert!(QUEUED.with(|q| q.borrow().is_empty()), "nothing left queued");

            // A short chain never queues: released in place, depth first.
            DEEPEST.store(0, Ordering::SeqCst);
            release_reference(py, chain(py, 3));
            assert_eq!(DROPPED.load(Ordering::SeqCst), N + 3);
            assert_eq!(DEEPEST.load(Ordering::SeqCst), 3);
            // An object that other references keep is not freed by the release.
            let kept = chain(py, 1);
            release_reference(py, kept.clone_ref(py));
            assert_eq!(DROPPED.load(Ordering::SeqCst), N + 3);
            drop(kept);
            assert_eq!(DROPPED.load(Ordering::SeqCst), N + 4);
        });
    }
}
