//! `Closable`: a Python object that `close()` releases (Event, Graph, StreamPool,
//! GreenContext), and what its Python methods share: `closed` and `close()` are the trait's,
//! `with` closes at the end of the block (`exit`), and pickling is refused, naming the type
//! and why (`reduce`). Each class's one `#[pymethods]` block has these methods, one line each.

use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::PyClass;

use crate::cpython::errors::refuse_pickle;

/// A Python object that `close()` releases.
pub trait Closable {
    /// Why it cannot be pickled, after "cannot pickle <type>: ".
    const PICKLE: &'static str;
    fn is_closed(&self) -> bool;
    /// Release what it holds; idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()>;
}

/// `__reduce__`: refused, naming the type and why.
pub fn reduce<T: Closable + PyClass>(obj: &Bound<'_, T>) -> PyResult<Py<PyType>> {
    Err(refuse_pickle(obj.as_any(), T::PICKLE))
}

/// `__exit__`: close, and let the exception (if any) propagate.
pub fn exit<T: Closable>(obj: &T, py: Python<'_>) -> PyResult<bool> {
    obj.close(py)?;
    Ok(false)
}
