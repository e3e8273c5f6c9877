//! The state word of every custream object that holds a driver object (Stream, Event, Graph,
//! GreenContext): the closed bit, the released bit, and the count of uses in flight.
//!
//! `close()` may race a `synchronize()` that let the GIL go (or, free-threaded, ran beside
//! it with no GIL at all), another `close()`, or the deallocation that follows. The rule
//! that keeps them apart: whoever moves the word to "closed with no users" releases the
//! object, and only one compare-and-swap can do that, so the driver object is destroyed (or
//! the deleter called, or the owner dropped) exactly once and never while a use is still in
//! flight. The orderings make everything a use did happen before the release (AcqRel on
//! every transition). `loom` checks both claims over every interleaving, in `cargo test`.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::cpython::stream_object::{
    CUSTREAM_STATE_CLOSED as CLOSED, CUSTREAM_STATE_RELEASED as RELEASED, CUSTREAM_STATE_USERS as USERS,
};

/// The operations the word needs, as std's `AtomicU32` has them.
pub trait Atom {
    fn load(&self, order: Ordering) -> u32;
    fn store(&self, value: u32, order: Ordering);
    fn fetch_sub(&self, value: u32, order: Ordering) -> u32;
    fn fetch_or(&self, value: u32, order: Ordering) -> u32;
    fn compare_exchange(&self, current: u32, new: u32, success: Ordering, failure: Ordering) -> Result<u32, u32>;
    fn compare_exchange_weak(&self, current: u32, new: u32, success: Ordering, failure: Ordering) -> Result<u32, u32>;
}

macro_rules! atom {
    ($t:ty) => {
        impl Atom for $t {
            #[inline]
            fn load(&self, order: Ordering) -> u32 {
                <$t>::load(self, order)
            }
            #[inline]
            fn store(&self, value: u32, order: Ordering) {
                <$t>::store(self, value, order)
            }
            #[inline]
            fn fetch_sub(&self, value: u32, order: Ordering) -> u32 {
                <$t>::fetch_sub(self, value, order)
            }
            #[inline]
            fn fetch_or(&self, value: u32, order: Ordering) -> u32 {
                <$t>::fetch_or(self, value, order)
            }
            #[inline]
            fn compare_exchange(&self, current: u32, new: u32, s: Ordering, f: Ordering) -> Result<u32, u32> {
                <$t>::compare_exchange(self, current, new, s, f)
            }
            #[inline]
            fn compare_exchange_weak(&self, current: u32, new: u32, s: Ordering, f: Ordering) -> Result<u32, u32> {
                <$t>::compare_exchange_weak(self, current, new, s, f)
            }
        }
    };
}

atom!(AtomicU32);
#[cfg(test)]
atom!(loom::sync::atomic::AtomicU32);

/// What the caller must do after `close()` or the end of a use.
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub enum Release {
    /// Release the object now: this caller won the right to, once.
    Now,
    /// Nothing: it is still in use, or somebody else released it.
    NotYours,
}

/// The state word's transitions, on any atomic that acts as one (std's in custream, loom's in
/// the model check below).
pub struct Word<'a, A: Atom = AtomicU32>(pub &'a A);

impl<A: Atom> Word<'_, A> {
    pub fn is_closed(&self) -> bool {
        self.0.load(Ordering::Acquire) & CLOSED != 0
    }

    /// Begin a use; false once closed.
    pub fn enter(&self) -> bool {
        let mut s = self.0.load(Ordering::Acquire);
        loop {
            if s & CLOSED != 0 || s & USERS == USERS {
                return false;
            }
            match self
                .0
                .compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// End a use begun by `enter`.
    pub fn leave(&self) -> Release {
        let before = self.0.fetch_sub(1, Ordering::AcqRel);
        if before == CLOSED | 1 {
            self.claim_release()
        } else {
            Release::NotYours
        }
    }

    /// Mark closed. `Now` if no use is in flight and nobody released it before.
    pub fn close(&self) -> Release {
        let before = self.0.fetch_or(CLOSED, Ordering::AcqRel);
        if before & CLOSED == 0 && before & USERS == 0 {
            self.claim_release()
        } else {
            Release::NotYours
        }
    }

    fn claim_release(&self) -> Release {
        match self
            .0
            .compare_exchange(CLOSED, CLOSED | RELEASED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Release::Now,
            Err(_) => Release::NotYours,
        }
    }

    /// At deallocation nothing else can reach the object (no reference, so no use in
    /// flight), so a load and a store do what `close` does: its read-modify-writes cost
    /// more than the rest of a borrowed stream's teardown.
    pub fn close_unshared(&self) -> Release {
        if self.0.load(Ordering::Acquire) & RELEASED != 0 {
            return Release::NotYours;
        }
        self.0.store(CLOSED | RELEASED, Ordering::Release);
        Release::Now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn close_without_users_releases_once() {
        let w = AtomicU32::new(0);
        let l = Word(&w);
        assert!(!l.is_closed());
        assert_eq!(l.close(), Release::Now);
        assert!(l.is_closed());
        assert_eq!(l.close(), Release::NotYours);
        assert!(!l.enter());
    }

    #[test]
    fn close_during_a_call_defers_release_to_the_caller() {
        let w = AtomicU32::new(0);
        let l = Word(&w);
        assert!(l.enter());
        assert!(l.enter());
        assert_eq!(l.close(), Release::NotYours);
        assert!(!l.enter(), "a closed object accepts no new uses");
        assert_eq!(l.leave(), Release::NotYours);
        assert_eq!(l.leave(), Release::Now);
        assert_eq!(l.close(), Release::NotYours);
    }

    #[test]
    fn calls_that_end_before_close_leave_nothing_to_release() {
        let w = AtomicU32::new(0);
        let l = Word(&w);
        assert!(l.enter());
        assert_eq!(l.leave(), Release::NotYours);
        assert_eq!(l.close(), Release::Now);
    }

    #[test]
    fn dealloc_releases_unless_close_already_did() {
        let w = AtomicU32::new(0);
        assert_eq!(Word(&w).close_unshared(), Release::Now);
        assert!(Word(&w).is_closed());
        assert_eq!(Word(&w).close_unshared(), Release::NotYours);
        let w = AtomicU32::new(0);
        assert_eq!(Word(&w).close(), Release::Now);
        assert_eq!(Word(&w).close_unshared(), Release::NotYours);
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
                        let l = Word(&*w);
                        for _ in 0..50 {
                            if l.enter() && l.leave() == Release::Now {
                                released.fetch_add(1, Ordering::SeqCst);
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

/// The model check: every interleaving loom can make of the uses, closes and the deallocation
/// that follows. A `Resource` stands for the driver object: a use reads it, the release
/// writes it, and loom fails the run if the two are not ordered (a release while a use is
/// in flight) or if the release happens other than once.
#[cfg(test)]
mod model {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::{AtomicU32 as LoomU32, AtomicUsize};
    use loom::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;

    struct Object {
        state: LoomU32,
        resource: UnsafeCell<u32>,
        releases: AtomicUsize,
    }

    impl Object {
        fn new() -> Arc<Object> {
            Arc::new(Object {
                state: LoomU32::new(0),
                resource: UnsafeCell::new(7),
                releases: AtomicUsize::new(0),
            })
        }

        fn word(&self) -> Word<'_, LoomU32> {
            Word(&self.state)
        }

        fn release(&self, how: Release) {
            if how == Release::Now {
                // SAFETY: what the model checks: loom fails the run if a use's read is not
                // ordered before this write.
                self.resource.with_mut(|p| unsafe { *p = 0 });
                self.releases.fetch_add(1, SeqCst);
            }
        }

        /// A use, as `lifecycle::enter` and the `InUse` drop make it.
        fn use_once(&self) {
            if self.word().enter() {
                // SAFETY: as in `release`: loom checks this read against the release's write.
                let seen = self.resource.with(|p| unsafe { *p });
                assert_eq!(seen, 7, "a use saw the object released");
                self.release(self.word().leave());
            }
        }

        fn close(&self) {
            self.release(self.word().close());
        }
    }

    #[test]
    fn a_close_racing_two_uses_releases_once_after_both() {
        loom::model(|| {
            let obj = Object::new();
            let users: Vec<_> = (0..2)
                .map(|_| {
                    let obj = obj.clone();
                    loom::thread::spawn(move || obj.use_once())
                })
                .collect();
            obj.close();
            for u in users {
                u.join().unwrap();
            }
            assert_eq!(obj.releases.load(SeqCst), 1);
        });
    }

    #[test]
    fn two_closes_and_a_use_release_once() {
        loom::model(|| {
            let obj = Object::new();
            let closer = {
                let obj = obj.clone();
                loom::thread::spawn(move || obj.close())
            };
            let user = {
                let obj = obj.clone();
                loom::thread::spawn(move || obj.use_once())
            };
            obj.close();
            closer.join().unwrap();
            user.join().unwrap();
            assert_eq!(obj.releases.load(SeqCst), 1);
        });
    }

    #[test]
    fn deallocation_after_racing_uses_releases_once() {
        loom::model(|| {
            let obj = Object::new();
            let user = {
                let obj = obj.clone();
                loom::thread::spawn(move || {
                    obj.use_once();
                    obj.use_once();
                })
            };
            obj.use_once();
            user.join().unwrap();
            // The last reference is gone: deallocation, unshared.
            obj.release(obj.word().close_unshared());
            assert_eq!(obj.releases.load(SeqCst), 1);
        });
    }

    #[test]
    fn a_use_racing_a_close_then_deallocation_release_once() {
        loom::model(|| {
            let obj = Object::new();
            let user = {
                let obj = obj.clone();
                loom::thread::spawn(move || obj.use_once())
            };
            obj.close();
            user.join().unwrap();
            obj.release(obj.word().close_unshared());
            assert_eq!(obj.releases.load(SeqCst), 1);
        });
    }
}
