//! Giving back a borrowed stream's reference to its owner, bounded in stack depth.
//!
//! Dropping an owner can deallocate it, and an owner may be another Stream with an owner of
//! its own: a chain of 100k streams would recurse 100k deep and overflow the C stack.
//! CPython's trashcan, which bounds this for its own types, is not in the limited API, so
//! the same is done here: past a nesting depth the release is queued, and the outermost
//! release on the thread drains the queue.

use std::cell::{Cell, RefCell};

use pyo3::ffi;
use pyo3::prelude::*;

/// How many owner releases may nest on one thread before further ones are queued.
const NESTING_LIMIT: u32 = 50;

thread_local! {
    static NESTING: Cell<u32> = const { Cell::new(0) };
    static QUEUED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// # Safety
/// `owner` is a strong reference the caller gives up; the GIL is held.
pub unsafe fn release(py: Python<'_>, owner: *mut ffi::PyObject) {
    let depth = NESTING.with(Cell::get);
    if depth >= NESTING_LIMIT {
        QUEUED.with(|q| q.borrow_mut().push(owner as usize));
        return;
    }
    NESTING.with(|d| d.set(depth + 1));
    // SAFETY: the caller's strong reference, given up here.
    drop(unsafe { Bound::from_owned_ptr(py, owner) });
    if depth == 0 {
        // No borrow is held across the drop: it may queue more.
        while let Some(next) = QUEUED.with(|q| q.borrow_mut().pop()) {
            // SAFETY: a strong reference queued above, given up here.
            drop(unsafe { Bound::from_owned_ptr(py, next as *mut ffi::PyObject) });
        }
    }
    NESTING.with(|d| d.set(depth));
}
