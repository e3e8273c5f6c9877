//! custream's exceptions, and the one conversion of a driver failure into one of them, so
//! `?` turns a `DriverError` into the right Python exception anywhere.

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;

use crate::driver::libcuda::LoadError;
use crate::driver::{self, capture_code, code, DriverError};

pyo3::create_exception!(
    custream,
    CudaUnavailableError,
    PyRuntimeError,
    "No usable CUDA driver on this machine: none could be loaded (the message names the\n\
     libraries looked for), or it is older than CUDA 12.0 (the message names its version).\n\
     Wrapping handles and the protocol still work; anything that needs the driver raises\n\
     this, except ``device_count()``, which is 0 without a driver library."
);

pyo3::create_exception!(
    custream,
    CudaError,
    PyRuntimeError,
    "A CUDA driver call failed. Attributes: ``code`` (the ``CUresult`` value), ``name``\n\
     (e.g. ``CUDA_ERROR_INVALID_HANDLE``) and ``message`` (the driver's own description)."
);

/// `__reduce__` of an object that holds a driver handle: pickling it is refused, with `why`.
pub fn refuse_pickle(obj: &Bound<'_, PyAny>, why: &str) -> PyErr {
    match obj.get_type().name() {
        Ok(name) => PyTypeError::new_err(format!("cannot pickle {name}: {why}")),
        Err(err) => err,
    }
}

fn unavailable_message(err: &LoadError) -> String {
    match err {
        LoadError::NotFound { looked_for, stub: None } => format!(
            "no CUDA driver: could not load libcuda (looked for {}); install the NVIDIA \
             driver, put the directory holding it on the library path, or name it in \
             CUSTREAM_LIBCUDA",
            looked_for.join(", ")
        ),
        LoadError::NotFound {
            looked_for,
            stub: Some(stub),
        } => format!(
            "no CUDA driver: only {stub} loaded, and it is the CUDA toolkit's link stub, not a \
             driver (looked for {}); install the NVIDIA driver, or name the real libcuda.so.1 \
             in CUSTREAM_LIBCUDA",
            looked_for.join(", ")
        ),
        LoadError::MissingSymbol { symbol, version } => format!(
            "the CUDA driver (CUDA {}) has no {symbol}, which custream calls; update the \
             NVIDIA driver",
            driver::version_text(*version)
        ),
    }
}

impl From<DriverError> for PyErr {
    fn from(err: DriverError) -> PyErr {
        let (status, name, message) = match err {
            DriverError::Unavailable(LoadError::MissingSymbol { version, .. })
                if version < driver::MIN_DRIVER_VERSION =>
            {
                return DriverError::TooOld(version).into();
            }
            DriverError::Unavailable(e) => return CudaUnavailableError::new_err(unavailable_message(&e)),
            DriverError::TooOld(version) => {
                return CudaUnavailableError::new_err(format!(
                    "the CUDA driver is too old: it supports CUDA {}, custream needs {} or newer \
                     (for cuCtxGetId); update the NVIDIA driver",
                    driver::version_text(version),
                    driver::version_text(driver::MIN_DRIVER_VERSION)
                ))
            }
            DriverError::Cuda { code, name, message } => (code, name, message),
            DriverError::Forked => (
                code::NOT_INITIALIZED,
                "CUDA_ERROR_NOT_INITIALIZED".to_owned(),
                "CUDA cannot be used in a process forked after CUDA was initialized, nor on a \
                 stream made before the fork; start workers with the 'spawn' or 'forkserver' method"
                    .to_owned(),
            ),
            DriverError::Finalizing => (
                code::DEINITIALIZED,
                "CUDA_ERROR_DEINITIALIZED".to_owned(),
                "the interpreter is shutting down; custream no longer calls the driver".to_owned(),
            ),
            DriverError::InHostFunction => (
                capture_code::NOT_PERMITTED,
                "CUDA_ERROR_NOT_PERMITTED".to_owned(),
                "called from inside a host function (Stream.launch_host_func): CUDA forbids CUDA \
                 calls there, and the driver may deadlock on one; do the work after the stream \
                 has run the host function, from another thread"
                    .to_owned(),
            ),
        };
        let text = format!("{name} ({status}): {message}");
        // The attributes need the interpreter; while it finalizes pyo3 will not attach, and
        // the exception goes without them.
        Python::try_attach(|py| {
            let made = || -> PyResult<PyErr> {
                let exc = py.get_type::<CudaError>().call1((&text,))?;
                exc.setattr("code", status)?;
                exc.setattr("name", name.as_str())?;
                exc.setattr("message", message.as_str())?;
                Ok(PyErr::from_value(exc))
            };
            made().unwrap_or_else(|e| e)
        })
        .unwrap_or_else(|| CudaError::new_err(text))
    }
}
