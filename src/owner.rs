//! Giving back a borrowed stream's reference to its owner, bounded in stack depth.
//!
//! Dropping an owner can deallocate it, and an owner may be another Stream with an owner of
//! its own: a chain of 100k streams would recurse 100k deep and overflow the C stack.
//! CPython's trashcan, which bounds this for its own types, is not in the limited API, so
//! the same is done here: past a nesting depth the release is queued, and the outermost
//! release on the thread drains the queue.

use std::cell::{Cell, RefCell};

use pyo3::prelude::*;

use crate::object::Owned;

/// How many owner releases may nest on one thread before further ones are queued.
const NESTING_LIMIT: u32 = 50;

thread_local! {
    static NESTING: Cell<u32> = const { Cell::new(0) };
    static QUEUED: RefCell<Vec<Owned>> = const { RefCell::new(Vec::new()) };
}

/// Give up `owner`, the strong reference a Stream held; the GIL is held (`py`).
pub fn release(py: Python<'_>, owner: Owned) {
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
