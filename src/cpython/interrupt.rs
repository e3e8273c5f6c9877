//! Waits that end: the `timeout=` argument, and the one way custream waits for something
//! that may take long (the GPU, a free stream of a pool): with the GIL let go, in slices,
//! looking for signals between them.
//!
//! A thread blocked inside a driver call cannot run Python's signal handlers, and a signal
//! does not cut a driver's wait short; so no wait here sits in the driver for longer than a
//! slice. Between slices the thread takes the GIL back and runs the handlers
//! (`PyErr_CheckSignals`, which does so on the main thread only, where Python runs them):
//! Ctrl-C ends a wait within a slice of the signal, with the handler's exception. What the
//! wait was for is left as it was (the stream and its work untouched).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyTimeoutError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBool;

use crate::cpython::args::short_repr;
use crate::cpython::gil;

/// The main thread's pthread id, learnt at import (`learn_main_thread`).
static MAIN_THREAD: AtomicU64 = AtomicU64::new(0);

/// Learn which thread is Python's main thread: the one where signal handlers run.
pub fn learn_main_thread(py: Python<'_>) -> PyResult<()> {
    let ident: u64 = py
        .import("threading")?
        .call_method0("main_thread")?
        .getattr("ident")?
        .extract()?;
    MAIN_THREAD.store(ident, Ordering::Relaxed);
    Ok(())
}

/// Whether this is Python's main thread, where a signal's handler runs: a wait there must
/// come back to Python between slices, where elsewhere a plain driver wait will do.
pub fn on_main_thread() -> bool {
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    me == MAIN_THREAD.load(Ordering::Relaxed)
}

/// The longest a wait stays away from Python: a handler's exception ends the wait within
/// this of its signal (the bound is twice that).
pub const SLICE: Duration = Duration::from_millis(50);

/// When a wait gives up: never, or at an instant.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Option<Instant>,
    /// The timeout as given, for the message.
    seconds: f64,
}

impl Deadline {
    pub const NEVER: Deadline = Deadline {
        at: None,
        seconds: f64::INFINITY,
    };

    /// A deadline `seconds` from now (non-negative; infinite or too far to represent: never).
    pub fn after(seconds: f64) -> Deadline {
        let at = Duration::try_from_secs_f64(seconds)
            .ok()
            .and_then(|d| Instant::now().checked_add(d));
        Deadline { at, seconds }
    }

    pub fn is_never(&self) -> bool {
        self.at.is_none()
    }

    /// The timeout as given, in seconds (infinite for `NEVER`).
    pub fn seconds(&self) -> f64 {
        self.seconds
    }

    /// What is left of the wait, up to one slice; `None` once the deadline has passed.
    fn next_slice(&self) -> Option<Duration> {
        match self.at {
            None => Some(SLICE),
            Some(at) => at
                .checked_duration_since(Instant::now())
                .filter(|left| !left.is_zero())
                .map(|left| left.min(SLICE)),
        }
    }

    /// The earlier of `d` from now and the deadline.
    pub fn within(&self, d: Duration) -> Instant {
        let soon = Instant::now() + d;
        self.at.map_or(soon, |at| at.min(soon))
    }

    /// `TimeoutError` for `what` (e.g. "Stream.synchronize()").
    pub fn expired(&self, what: &str) -> PyErr {
        PyTimeoutError::new_err(format!(
            "{what} timed out after {} s; the work it waits for is still queued",
            self.seconds
        ))
    }
}

/// A `timeout=` argument of `fname`: None (never), or seconds as an int or float (not a
/// bool), non-negative and not NaN.
pub fn timeout_arg(value: Option<&Bound<'_, PyAny>>, fname: &str) -> PyResult<Deadline> {
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(Deadline::NEVER);
    };
    let seconds = match v.extract::<f64>() {
        Ok(s) if !v.is_instance_of::<PyBool>() => s,
        _ => {
            return Err(PyTypeError::new_err(format!(
                "{fname}() timeout must be a number of seconds (int or float) or None, got {}",
                v.get_type().name()?
            )))
        }
    };
    if seconds.is_nan() || seconds < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{fname}() timeout must be a non-negative number of seconds or None, got {}",
            short_repr(v)
        )));
    }
    Ok(Deadline::after(seconds))
}

/// Wait until `wait_for(slice)` says done (it waits at most `slice`, with the GIL let go,
/// and answers whether what it waits for happened), running signal handlers between slices.
/// Errors: the handler's exception, `deadline.expired(what)`, or one `wait_for` returned.
/// `wait_for` is called once even with a deadline already passed (`timeout=0`: a poll).
pub fn wait<W>(py: Python<'_>, deadline: Deadline, what: &str, wait_for: W) -> PyResult<()>
where
    W: Send + FnMut(Duration) -> PyResult<bool>,
{
    wait_or(py, deadline, || deadline.expired(what), wait_for)
}

/// `wait`, with `expired` making the error raised at the deadline: for a wait on something
/// else than queued work (a free stream of a pool, src/pool/lease.rs).
pub fn wait_or<W>(py: Python<'_>, deadline: Deadline, expired: impl Fn() -> PyErr, mut wait_for: W) -> PyResult<()>
where
    W: Send + FnMut(Duration) -> PyResult<bool>,
{
    let mut slice = deadline.next_slice().unwrap_or(Duration::ZERO);
    loop {
        let wait_for = &mut wait_for;
        if gil::detach(py, move || wait_for(slice))? {
            return Ok(());
        }
        py.check_signals()?;
        slice = deadline.next_slice().ok_or_else(&expired)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_python(f: impl for<'py> FnOnce(Python<'py>)) {
        Python::initialize();
        Python::attach(f);
    }

    #[test]
    fn timeouts_are_numbers_of_seconds() {
        with_python(|py| {
            let arg = |src: &std::ffi::CStr| timeout_arg(Some(&py.eval(src, None, None).unwrap()), "f");
            let msg = |e: PyErr| format!("{}: {}", e.get_type(py).name().unwrap(), e.value(py));
            assert!(timeout_arg(None, "f").unwrap().is_never());
            assert!(arg(c"None").unwrap().is_never());
            assert!(arg(c"float('inf')").unwrap().is_never());
            assert!(!arg(c"0").unwrap().is_never());
            assert!(!arg(c"2.5").unwrap().is_never());
            assert_eq!(
                msg(arg(c"-1").unwrap_err()),
                "ValueError: f() timeout must be a non-negative number of seconds or None, got -1"
            );
            assert_eq!(
                msg(arg(c"float('nan')").unwrap_err()),
                "ValueError: f() timeout must be a non-negative number of seconds or None, got nan"
            );
            assert_eq!(
                msg(arg(c"'1'").unwrap_err()),
                "TypeError: f() timeout must be a number of seconds (int or float) or None, got str"
            );
            assert!(arg(c"True").is_err());
        });
    }

    #[test]
    fn a_wait_ends_when_done_or_at_its_deadline() {
        with_python(|py| {
            let mut calls = 0;
            wait(py, Deadline::NEVER, "w", |_| {
                calls += 1;
                Ok(calls == 3)
            })
            .unwrap();
            assert_eq!(calls, 3);

            // timeout=0 still looks once.
            let mut looked = 0;
            let err = wait(py, Deadline::after(0.0), "w()", |s| {
                looked += 1;
                assert!(s.is_zero());
                Ok(false)
            })
            .unwrap_err();
            assert_eq!(looked, 1);
            assert!(err.is_instance_of::<PyTimeoutError>(py));
            assert_eq!(
                err.value(py).to_string(),
                "w() timed out after 0 s; the work it waits for is still queued"
            );

            let start = Instant::now();
            let err = wait(py, Deadline::after(0.12), "w()", |s| {
                assert!(s <= SLICE);
                std::thread::sleep(s);
                Ok(false)
            })
            .unwrap_err();
            assert!(err.is_instance_of::<PyTimeoutError>(py));
            let took = start.elapsed();
            assert!(
                took >= Duration::from_millis(120) && took < Duration::from_secs(2),
                "{took:?}"
            );
        });
    }
}
