//! The Python face of the object `sys.unraisablehook` gets for an exception a host function
//! raised (src/callback.rs makes it).

use pyo3::prelude::*;

use crate::callback::HostFunction;

#[pymethods]
impl HostFunction {
    fn __repr__(&self, py: Python<'_>) -> String {
        let function = self
            .function
            .bind(py)
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| "<function>".into());
        let device = self.device.map(|d| format!(" device={d}")).unwrap_or_default();
        format!(
            "<custream host function {function} launched on custream.Stream handle={:#x}{device}>",
            self.stream
        )
    }
}
