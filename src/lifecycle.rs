//! The one word of a Stream's state that changes after creation (`CustreamStream.state`):
//! the closed bit, the released bit, and the count of driver calls in flight on the handle.
//!
//! `close()` may race a `synchronize()` that released the GIL, another `close()`, or the
//! deallocation that follows. The rule that keeps them apart: whoever moves the word to
//! "closed with no users" releases the stream, and only one compare-and-swap can do that,
//! so the handle is destroyed (or the deleter called) exactly once and never while a call
//! on it is still in flight.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::layout::{CUSTREAM_STATE_CLOSED as CLOSED, CUSTREAM_STATE_RELEASED as RELEASED, CUSTREAM_STATE_USERS as USERS};

pub struct Lifecycle<'a>(&'a AtomicU32);

/// What the caller must do after `close()` or the end of a use.
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub enum Release {
    /// Release the stream now: this caller won the right to, once.
    Now,
    /// Nothing: it is still in use, or somebody else released it.
    NotYours,
}

impl<'a> Lifecycle<'a> {
    pub fn new(word: &'a AtomicU32) -> Self {
        Lifecycle(word)
    }

    /// # Safety
    /// `word` must point at a live `state` field that is only ever accessed atomically.
    pub unsafe fn from_ptr(word: *mut u32) -> Self {
        Lifecycle(AtomicU32::from_ptr(word))
    }

    pub fn is_closed(&self) -> bool {
        self.0.load(Ordering::Acquire) & CLOSED != 0
    }

    /// Begin a driver call on the handle; fails once the stream is closed.
    pub fn enter(&self) -> Result<(), ()> {
        let mut s = self.0.load(Ordering::Acquire);
        loop {
            if s & CLOSED != 0 || s & USERS == USERS {
                return Err(());
            }
            match self.0.compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(now) => s = now,
            }
        }
    }

    /// End a driver call begun by `enter`.
    pub fn leave(&self) -> Release {
        let before = self.0.fetch_sub(1, Ordering::AcqRel);
        if before == CLOSED | 1 {
            self.claim_release()
        } else {
            Release::NotYours
        }
    }

    /// Mark closed. Returns `Now` if no call is in flight and nobody released it before.
    pub fn close(&self) -> Release {
        let before = self.0.fetch_or(CLOSED, Ordering::AcqRel);
        if before & CLOSED == 0 && before & USERS == 0 {
            self.claim_release()
        } else {
            Release::NotYours
        }
    }

    fn claim_release(&self) -> Release {
        match self.0.compare_exchange(CLOSED, CLOSED | RELEASED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Release::Now,
            Err(_) => Release::NotYours,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    fn word() -> Box<u32> {
        Box::new(0)
    }

    #[test]
    fn close_without_users_releases_once() {
        let mut w = word();
        let l = unsafe { Lifecycle::from_ptr(&mut *w) };
        assert!(!l.is_closed());
        assert_eq!(l.close(), Release::Now);
        assert!(l.is_closed());
        assert_eq!(l.close(), Release::NotYours);
        assert!(l.enter().is_err());
    }

    #[test]
    fn close_during_a_call_defers_release_to_the_caller() {
        let mut w = word();
        let l = unsafe { Lifecycle::from_ptr(&mut *w) };
        l.enter().unwrap();
        l.enter().unwrap();
        assert_eq!(l.close(), Release::NotYours);
        assert!(l.enter().is_err(), "a closed stream accepts no new calls");
        assert_eq!(l.leave(), Release::NotYours);
        assert_eq!(l.leave(), Release::Now);
        assert_eq!(l.close(), Release::NotYours);
    }

    #[test]
    fn calls_that_end_before_close_leave_nothing_to_release() {
        let mut w = word();
        let l = unsafe { Lifecycle::from_ptr(&mut *w) };
        l.enter().unwrap();
        assert_eq!(l.leave(), Release::NotYours);
        assert_eq!(l.close(), Release::Now);
    }

    #[test]
    fn racing_threads_release_exactly_once() {
        for _ in 0..200 {
            let w: Arc<AtomicU32> = Arc::new(AtomicU32::new(0));
            let released = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..8)
                .map(|i| {
                    let (w, released) = (w.clone(), released.clone());
                    std::thread::spawn(move || {
                        let l = unsafe { Lifecycle::from_ptr(w.as_ptr()) };
                        for _ in 0..50 {
                            if l.enter().is_ok() {
                                if l.leave() == Release::Now {
                                    released.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                        }
                        if i % 2 == 0 && l.close() == Release::Now {
                            released.fetch_add(1, Ordering::SeqCst);
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(released.load(Ordering::SeqCst), 1);
        }
    }
}
