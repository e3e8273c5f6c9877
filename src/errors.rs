//! custream's exceptions, and the one place driver failures become Python exceptions.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::driver::{self, DriverError};

pyo3::create_exception!(
    custream,
    CudaUnavailableError,
    PyRuntimeError,
    "No usable CUDA driver on this machine: none could be loaded (the message names the \
     libraries looked for), or it is older than CUDA 12.0. Wrapping handles and the protocol \
     still work; anything that needs the driver raises this."
);

pyo3::create_exception!(
    custream,
    CudaError,
    PyRuntimeError,
    "A CUDA driver call failed. Attributes: ``code`` (the ``CUresult`` value), ``name`` \
     (e.g. ``CUDA_ERROR_INVALID_HANDLE``) and ``message`` (the driver's own description)."
);

/// The exception for a failed driver call (or a refused one).
pub fn to_pyerr(py: Python<'_>, err: DriverError) -> PyErr {
    let (code, name, message) = match err {
        DriverError::Unavailable(names) => {
            return CudaUnavailableError::new_err(format!(
                "no CUDA driver: could not load libcuda (looked for {}); install the NVIDIA \
                 driver or put the directory holding libcuda.so.1 on LD_LIBRARY_PATH",
                names.join(", ")
            ))
        }
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
            3,
            "CUDA_ERROR_NOT_INITIALIZED".to_owned(),
            "CUDA cannot be used in a process forked after CUDA was initialized, nor on a \
             stream made before the fork; start workers with the 'spawn' or 'forkserver' method"
                .to_owned(),
        ),
        DriverError::Finalizing => (
            4,
            "CUDA_ERROR_DEINITIALIZED".to_owned(),
            "the interpreter is shutting down; custream no longer calls the driver".to_owned(),
        ),
    };
    let make = || -> PyResult<PyErr> {
        let exc = py.get_type::<CudaError>().call1((format!("{name} ({code}): {message}"),))?;
        exc.setattr("code", code)?;
        exc.setattr("name", name.as_str())?;
        exc.setattr("message", message.as_str())?;
        Ok(PyErr::from_value(exc))
    };
    make().unwrap_or_else(|e| e)
}

pub trait IntoPyResult<T> {
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, DriverError> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_pyerr(py, e))
    }
}

pub fn closed_error(what: &str) -> PyErr {
    PyValueError::new_err(format!("{what} on a closed custream.Stream"))
}
