//! The Python methods every closable custream object shares, written once: `closed`,
//! `close()` and the refusal to pickle for Event, Graph and StreamPool, and `with` (closing
//! at the end of the block) for Event and Graph. What closing means is each type's
//! `lifecycle::Closable`.

use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};

use crate::errors::refuse_pickle;
use crate::lifecycle::Closable;

/// `__reduce__`: refused, naming the type and why.
pub fn reduce<T: Closable>(obj: &Bound<'_, PyAny>) -> PyResult<Py<PyType>> {
    Err(refuse_pickle(obj, T::PICKLE))
}

/// `__exit__`: close, and let the exception (if any) propagate.
pub fn exit<T: Closable>(obj: &T, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
    obj.close(py)?;
    Ok(false)
}

/// The shared methods of `$t`, in a `#[pymethods]` block of their own; `with` adds
/// `__enter__` and `__exit__`.
macro_rules! closable_methods {
    ($t:ty, $close_doc:literal) => {
        #[pyo3::pymethods]
        impl $t {
            /// True once close() has been called.
            #[getter(closed)]
            fn closable_closed(&self) -> bool {
                $crate::lifecycle::Closable::is_closed(self)
            }

            #[doc = $close_doc]
            #[pyo3(name = "close")]
            fn closable_close(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<()> {
                $crate::lifecycle::Closable::close(self, py)
            }

            fn __reduce__(slf: &pyo3::Bound<'_, Self>) -> pyo3::PyResult<pyo3::Py<pyo3::types::PyType>> {
                $crate::closable::reduce::<Self>(slf.as_any())
            }
        }
    };
    ($t:ty, $close_doc:literal, with) => {
        $crate::closable::closable_methods!($t, $close_doc);

        #[pyo3::pymethods]
        impl $t {
            fn __enter__(slf: pyo3::Py<Self>) -> pyo3::Py<Self> {
                slf
            }

            #[pyo3(signature = (*_exc))]
            fn __exit__(
                &self,
                py: pyo3::Python<'_>,
                _exc: &pyo3::Bound<'_, pyo3::types::PyTuple>,
            ) -> pyo3::PyResult<bool> {
                $crate::closable::exit(self, py, _exc)
            }
        }
    };
}
pub(crate) use closable_methods;
