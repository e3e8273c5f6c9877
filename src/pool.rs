//! What a custream.StreamPool is: a fixed set of owned streams made up front and handed out
//! round-robin, for code that wants a fresh-looking stream per task without paying a
//! create each time (rmm's `cuda_stream_pool`, PyTorch's internal pool). Its Python methods
//! are the one `#[pymethods]` block here.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::args::{bool_arg, device_arg, i32_arg, is_int_not_bool};
use crate::closable::{self, Closable};
use crate::green::{green_context_arg, GreenContext};
use crate::raw_stream::StreamObject;
use crate::stream;

/// The most streams one pool makes: far above any use (rmm's default is 16), low enough
/// that a typo does not try to make millions.
const MAX_SIZE: usize = 1 << 16;

/// A fixed set of owned streams, handed out round-robin.
///
/// ``StreamPool(size, *, device=None, non_blocking=True, priority=0, green_context=None)``
/// creates ``size`` streams in ``device``'s primary context (default: the current context's
/// device, else 0), or in ``green_context`` (a custream.GreenContext) when given.
/// ``get()`` hands them out in turn (thread-safe, no lock), ``pool[i]`` and ``len(pool)``
/// index them. A pool's stream is a plain custream.Stream to every consumer; it stays valid
/// while the pool is open, and only ``pool.close()`` (idempotent) closes it.
#[pyclass(module = "custream", frozen)]
pub struct StreamPool {
    streams: Box<[Py<PyAny>]>,
    next: AtomicUsize,
    closed: AtomicBool,
    device: i32,
}

impl StreamPool {
    /// `green`: made in that green context (non-blocking, on its device; checked by the caller).
    pub fn new(
        py: Python<'_>,
        size: usize,
        device: Option<i32>,
        non_blocking: bool,
        priority: i32,
        green: Option<&Bound<'_, GreenContext>>,
    ) -> PyResult<Self> {
        let mut streams: Vec<Py<PyAny>> = Vec::with_capacity(size);
        for _ in 0..size {
            let made = match green {
                Some(gc) => stream::create_green(py, gc, priority, true, "StreamPool()"),
                None => stream::create(py, device, non_blocking, priority, true),
            };
            match made {
                Ok(s) => streams.push(s.unbind()),
                Err(e) => {
                    close_all(py, &streams);
                    return Err(e);
                }
            }
        }
        let first = streams
            .first()
            .ok_or_else(|| PyValueError::new_err("StreamPool() size must be at least 1"))?;
        let device = StreamObject::of(first.bind(py), "StreamPool")?
            .known_device()
            .unwrap_or(0);
        Ok(StreamPool {
            streams: streams.into_boxed_slice(),
            next: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            device,
        })
    }

    fn ensure_open(&self, what: &str) -> PyResult<()> {
        if self.is_closed() {
            return Err(PyValueError::new_err(format!("{what} on a closed custream.StreamPool")));
        }
        Ok(())
    }
}

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

    /// The next stream, round-robin (thread-safe, no lock): one atomic add.
    pub fn get<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.ensure_open("get()")?;
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.streams.len();
        Ok(self.streams[i].bind(py).clone())
    }

    /// `pool[index]`, negative indices counting from the end.
    pub fn __getitem__<'py>(&self, py: Python<'py>, index: isize) -> PyResult<Bound<'py, PyAny>> {
        self.ensure_open("pool[i]")?;
        let len = self.streams.len();
        let at = if index < 0 {
            len.checked_sub(index.unsigned_abs())
        } else {
            Some(index.unsigned_abs())
        };
        match at.filter(|&i| i < len) {
            Some(i) => Ok(self.streams[i].bind(py).clone()),
            None => Err(PyIndexError::new_err(format!(
                "StreamPool index {index} out of range for a pool of {len}"
            ))),
        }
    }

    pub fn __len__(&self) -> usize {
        self.streams.len()
    }

    /// The device the pool's streams belong to.
    #[getter]
    pub fn device(&self) -> i32 {
        self.device
    }

    fn __repr__(&self) -> String {
        let closed = if self.is_closed() { " closed" } else { "" };
        format!(
            "<custream.StreamPool size={} device={}{closed}>",
            self.__len__(),
            self.device()
        )
    }

    /// True once close() has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// Close every stream of the pool; idempotent.
    #[pyo3(name = "close")]
    fn py_close(&self, py: Python<'_>) -> PyResult<()> {
        Closable::close(self, py)
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<Py<PyType>> {
        closable::reduce(slf)
    }
}

impl Closable for StreamPool {
    const PICKLE: &'static str = "CUDA streams belong to one process";

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Close every stream; idempotent. The first error is raised after all were closed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut first_error = None;
        for s in &self.streams {
            if let Err(e) = StreamObject::of(s.bind(py), "StreamPool").and_then(|s| s.close_pooled(py)) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

fn close_all(py: Python<'_>, streams: &[Py<PyAny>]) {
    for s in streams {
        let _ = StreamObject::of(s.bind(py), "StreamPool").and_then(|s| s.close_pooled(py));
    }
}

impl Drop for StreamPool {
    /// A pool dropped without close() closes its streams as close() would: a stream
    /// outliving its pool is not valid (it may still be referenced elsewhere).
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            let _ = Python::try_attach(|py| close_all(py, &self.streams));
        }
    }
}
