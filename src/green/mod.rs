//! Green contexts: `custream.GreenContext`, a slice of one device's SMs that streams are made
//! in (CUDA green contexts, driver 12.4 and newer).
//!
//! - `context`: what a GreenContext is (made by custream or adopted with an owner kept
//!   alive, under the lifecycle of `object/`), the registry of the known ones, the
//!   `green_context=` argument, and `create_stream`: a stream made in one, which holds it open.
//! - `methods`: the class's one `#[pymethods]` block: arguments parsed, work delegated to
//!   `context`.
//!
//! Offers `GreenContext`, `create_stream`, `green_context_arg`, `known`, `register`. Uses
//! `object/`, `cpython/` and `driver/`.

pub mod context;
pub mod methods;

pub use context::{create_stream, green_context_arg, known, register, GreenContext};
