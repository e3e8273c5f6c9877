//! What every custream object stands on: how a Stream object is made (its memory is
//! src/cpython/stream_object.rs's, behind the boundary), and the one lifecycle of every object
//! that holds a driver object (Stream, Event, Graph, GreenContext).
//!
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
pub mod lifecycle;
pub mod make;
pub mod protocol;
pub mod state_word;
