//! What every custream object stands on: the Stream object's memory and how one is made, and
//! the one lifecycle of every object that holds a driver object (Stream, Event, Graph,
//! GreenContext).
//!
//! - `layout`: the C layout of pxd/custream.h (bindgen's output, kept once).
//! - `memory`: a Stream object's memory, reached through raw pointers here only: the safe
//!   `StreamObject` view, `alloc`, the `entry!` shims of the Stream type's slots.
//! - `make`: how a Stream object is made (owned, borrowed, the default streams; green
//!   contexts' streams are made in `green/` and handed to `make::own`), and the registry of
//!   the owned streams alive.
//! - `protocol`: the CUDA Stream Protocol, consumer side (`as_stream`).
//! - `lifecycle` and `state_word`: a use holds an object open (`InUse`); it is closed and
//!   released exactly once (the state word, model-checked with loom).
//! - `home_context`: `Home`, the context a driver object lives in, and the primary-context
//!   policy; `deferred_release`: the releases a host function asked for.
//! - `closable`: what the closable classes share (`closed`, `close()`, `with`, no pickling).
//!
//! What a Stream does with its memory is `stream/`'s. Uses `cpython/` and `driver/`.

pub mod closable;
pub mod deferred_release;
pub mod home_context;
pub mod layout;
pub mod lifecycle;
pub mod make;
pub mod memory;
pub mod protocol;
pub mod state_word;
