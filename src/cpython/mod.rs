//! The CPython boundary: what every feature uses to meet the interpreter.
//!
//! - `boundary`: where CPython or a C caller enters Rust through a raw function pointer (no
//!   panic crosses; a `PyErr` becomes the raised exception).
//! - `raw_call`: CPython's calling conventions as safe views (`Fastcall`, `TupleDict`), the
//!   shims of module functions and hand-built methods.
//! - `args`: arguments matched to parameter names with CPython's wording, and short reprs.
//! - `errors`: custream's exceptions and the one conversion of a driver failure.
//! - `gil`: letting the GIL go around a driver call, never re-entering a finalizing interpreter.
//! - `interrupt`: `timeout=` (`Deadline`), and waits in slices that run Python's signal
//!   handlers between them, so Ctrl-C ends them.
//!
//! Uses only `driver/`.

pub mod args;
pub mod boundary;
pub mod errors;
pub mod gil;
pub mod interrupt;
pub mod raw_call;
