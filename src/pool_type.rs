//! The Python face of custream.StreamPool: arguments parsed, work delegated to src/pool.rs.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::args::{bool_arg, device_arg, i32_arg, is_int_not_bool};
use crate::closable::closable_methods;
use crate::green_type::green_context_arg;
use crate::lifecycle::Closable;
use crate::pool::StreamPool;

/// The most streams one pool makes: far above any use (rmm's default is 16), low enough
/// that a typo does not try to make millions.
const MAX_SIZE: usize = 1 << 16;

#[pymethods]
impl StreamPool {
    #[new]
    #[pyo3(signature = (size, *, device = None, non_blocking = None, priority = None, green_context = None),
           text_signature = "(size, *, device=None, non_blocking=True, priority=0, green_context=None)")]
    fn py_new(
        py: Python<'_>,
        size: &Bound<'_, PyAny>,
        device: Option<Bound<'_, PyAny>>,
        non_blocking: Option<Bound<'_, PyAny>>,
        priority: Option<Bound<'_, PyAny>>,
        green_context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<StreamPool> {
        if !is_int_not_bool(size) {
            return Err(PyTypeError::new_err(format!(
                "StreamPool() size must be an int, got {}",
                size.get_type().name()?
            )));
        }
        let size = size
            .extract::<i64>()
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=MAX_SIZE).contains(n))
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "StreamPool() size must be between 1 and {MAX_SIZE}, got {size}"
                ))
            })?;
        let device = device_arg(device.as_ref(), "StreamPool")?;
        let non_blocking = bool_arg(non_blocking.as_ref(), "StreamPool", "non_blocking", true)?;
        let priority = i32_arg(priority.as_ref(), "StreamPool", "priority", 0)?;
        let green = green_context_arg(green_context.as_ref(), "StreamPool", device, non_blocking)?;
        StreamPool::new(py, size, device, non_blocking, priority, green.as_ref())
    }

    fn __repr__(&self) -> String {
        let closed = if self.is_closed() { " closed" } else { "" };
        format!(
            "<custream.StreamPool size={} device={}{closed}>",
            self.__len__(),
            self.device()
        )
    }
}

closable_methods!(StreamPool, "Close every stream of the pool; idempotent.");
