//! The CPython boundary: what every feature uses to meet the interpreter.
//!
//! - `boundary`: where CPython or a C caller enters Rust through a raw function pointer (no
//!   panic crosses; a `PyErr` becomes the raised exception); `ObjectCell` and
//!   `sole_reference`, what a recycled Lease needs of an object beyond pyo3's safe API.
//! - `raw_call`: CPython's calling conventions as safe views (`Fastcall`, `TupleDict`), the
//!   shims of the C API's object arguments, and `hand_built_method!`: the one way a class
//!   gets a method pyo3 does not build (a `#[classattr]` of its `#[pymethods]` block).
//! - `stream_object`: a Stream object's C layout and memory (`StreamObject`, `alloc`).
//! - `stream_type`: the Stream type's tables and the shims of its slots (`stream_type!`),
//!   built from slots for its C layout.
//! - `args`: arguments matched to parameter names with CPython's wording, and short reprs.
//! - `errors`: custream's exceptions and the one conversion of a driver failure.
//! - `gil`: letting the GIL go around a driver call, never re-entering a finalizing interpreter.
//! - `interrupt`: `timeout=` (`Deadline`), and waits in slices that run Python's signal
//!   handlers between them, so Ctrl-C ends them.
//!
//! Raw CPython pointers appear in `boundary`, `raw_call`, `stream_object`, `stream_type` and
//! `gil` only (and in src/capi.rs): docs/design.md, "The unsafe boundary".
//!
//! Uses only `driver/`.

pub mod args;
pub mod boundary;
pub mod errors;
pub mod gil;
pub mod interrupt;
pub mod raw_call;
pub mod stream_object;
pub mod stream_type;
