//! A stream's settings: `s.sync_policy`, `s.set_access_policy_window()` and
//! `s.access_policy_window`, `s.mem_sync_domain`, `s.copy_settings_from(other)`.
//!
//! The driver keeps them on the stream (src/driver/attributes.rs), so a setting made here
//! binds every library that waits or launches on the handle: CuPy's, PyTorch's and
//! cuda.core's work on the same stream too. Nothing is cached: every read asks the driver, so
//! a setting another library made is seen. Values are checked before the driver is called,
//! with errors naming the argument; the window's size against the device's largest
//! (`CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE`, 0 on a device without one: a
//! `CudaError`). The default-stream tokens answer reads (the driver's answer for the current
//! context's stream) and refuse writes: that stream is every library's in the context.
//!
//! custream's own waits follow the policy (`wait_policy`, src/stream/methods.rs's
//! `synchronize_until`): "blocking" arms a notifier at once and polls nothing, "spin" polls
//! until the work is done and never sleeps, "yield" polls yielding the CPU between queries, and
//! "auto" polls its first 20 ms (src/waits/for_gpu.rs).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyString};

use crate::cpython::args::{choice_arg, int_repr, is_int_not_bool, short_repr, Signature};
use crate::cpython::gil;
use crate::cpython::raw_call::Fastcall;
use crate::cpython::stream_object::StreamObject;
use crate::driver::{self, code, AccessPolicyWindow, AccessProperty, DriverError, MemSyncDomain, SyncPolicy};
use crate::memops;
use crate::object::make::DEFAULT_NAMES;
use crate::object::protocol;

impl StreamObject<'_> {
    /// The policy custream's own waits on the stream follow: the driver's, or auto where the
    /// driver does not answer (a driver without the attribute; a closed stream's wait fails
    /// on its next step anyway).
    pub fn wait_policy(self, py: Python<'_>) -> SyncPolicy {
        self.use_handle(py, "synchronize()", driver::stream_sync_policy)
            .unwrap_or(SyncPolicy::Auto)
    }

    /// Refuse a write on a default-stream token.
    fn writable(self, what: &str) -> PyResult<()> {
        if !self.is_default() {
            return Ok(());
        }
        let name = DEFAULT_NAMES
            .get(self.handle_value() as usize)
            .copied()
            .unwrap_or("DEFAULT_STREAM");
        Err(PyValueError::new_err(format!(
            "{what} cannot be set on custream.{name}: a default stream is shared by every library \
             in the context; set it on a stream of your own"
        )))
    }

    pub fn set_sync_policy(self, py: Python<'_>, policy: SyncPolicy) -> PyResult<()> {
        const WHAT: &str = "Stream.sync_policy";
        self.writable(WHAT)?;
        self.use_handle(py, WHAT, |h| {
            gil::brief(py, move || driver::stream_set_sync_policy(h, policy))
        })
    }

    pub fn sync_policy(self, py: Python<'_>) -> PyResult<SyncPolicy> {
        self.use_handle(py, "Stream.sync_policy", |h| {
            gil::brief(py, move || driver::stream_sync_policy(h))
        })
    }

    /// Set the window (checked against the device's largest), or clear it (None). `what`
    /// names the call in errors.
    pub fn set_access_policy_window(
        self,
        py: Python<'_>,
        window: Option<AccessPolicyWindow>,
        what: &str,
    ) -> PyResult<()> {
        self.writable(what)?;
        if let Some(w) = window {
            let device = self.device(py)?;
            let most = gil::brief(py, move || driver::max_access_policy_window(device))?;
            if most == 0 {
                return Err(DriverError::Cuda {
                    code: code::NOT_SUPPORTED,
                    name: "CUDA_ERROR_NOT_SUPPORTED".to_owned(),
                    message: format!(
                        "device {device} has no L2 access-policy window \
                         (CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE is 0; compute capability 8.0 \
                         and newer have one)"
                    ),
                }
                .into());
            }
            if w.bytes > most {
                return Err(PyValueError::new_err(format!(
                    "{what} nbytes {} is more than device {device}'s largest window, {most} bytes \
                     (CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE)",
                    w.bytes
                )));
            }
        }
        self.use_handle(py, what, |h| {
            gil::brief(py, move || driver::stream_set_access_policy_window(h, window))
        })
    }

    pub fn access_policy_window(self, py: Python<'_>) -> PyResult<Option<AccessPolicyWindow>> {
        self.use_handle(py, "Stream.access_policy_window", |h| {
            gil::brief(py, move || driver::stream_access_policy_window(h))
        })
    }

    pub fn set_mem_sync_domain(self, py: Python<'_>, domain: MemSyncDomain) -> PyResult<()> {
        const WHAT: &str = "Stream.mem_sync_domain";
        self.writable(WHAT)?;
        self.use_handle(py, WHAT, |h| {
            gil::brief(py, move || driver::stream_set_mem_sync_domain(h, domain))
        })
    }

    pub fn mem_sync_domain(self, py: Python<'_>) -> PyResult<MemSyncDomain> {
        self.use_handle(py, "Stream.mem_sync_domain", |h| {
            gil::brief(py, move || driver::stream_mem_sync_domain(h))
        })
    }

    /// Every setting of `src` copied onto this stream (cuStreamCopyAttributes), both held
    /// open for the call.
    pub fn copy_settings_from(self, py: Python<'_>, src: StreamObject<'_>) -> PyResult<()> {
        const WHAT: &str = "copy_settings_from()";
        self.writable(WHAT)?;
        self.use_handle_py(py, WHAT, |to| {
            src.use_handle(py, WHAT, |from| {
                gil::brief(py, move || driver::stream_copy_attributes(to, from))
            })
        })
    }
}

// ---- the Python face (the table is src/stream/slots.rs's) -------------------------------

fn text(py: Python<'_>, s: &str) -> Py<PyAny> {
    PyString::new(py, s).into_any().unbind()
}

/// `names` as Python strs, made once (interned): the getters hand out the same object every
/// time (making a new str was a third of the getter's own work), and a setter given one of
/// them (a name written in the code is interned too) finds it by identity.
fn interned<'a, const N: usize>(
    py: Python<'_>,
    made: &'a PyOnceLock<[Py<PyString>; N]>,
    names: [&'static str; N],
) -> &'a [Py<PyString>; N] {
    made.get_or_init(py, || names.map(|n| PyString::intern(py, n).unbind()))
}

/// `name`, one of `names`, as its interned str.
fn named<const N: usize>(
    py: Python<'_>,
    made: &PyOnceLock<[Py<PyString>; N]>,
    names: [&'static str; N],
    name: &str,
) -> Py<PyAny> {
    let made = interned(py, made, names);
    match names.iter().position(|n| *n == name) {
        Some(i) => made[i].clone_ref(py).into_any(),
        None => text(py, name),
    }
}

/// The index in `names` of `v`, a setter's value: found by identity when it is one of the
/// interned strs (a name written in the code), else by its text (`choice_arg`, whose errors
/// name `what`).
fn chosen<const N: usize>(
    py: Python<'_>,
    made: &PyOnceLock<[Py<PyString>; N]>,
    names: [&'static str; N],
    v: &Bound<'_, PyAny>,
    what: &str,
) -> PyResult<usize> {
    match interned(py, made, names).iter().position(|n| n.as_ptr() == v.as_ptr()) {
        Some(i) => Ok(i),
        None => choice_arg(v, what, &names),
    }
}

static POLICY_NAMES: PyOnceLock<[Py<PyString>; 4]> = PyOnceLock::new();
static DOMAIN_NAMES: PyOnceLock<[Py<PyString>; 2]> = PyOnceLock::new();

pub fn get_sync_policy(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(named(py, &POLICY_NAMES, SyncPolicy::NAMES, s.sync_policy(py)?.name()))
}

/// `del s.sync_policy` is refused: a policy is set, never removed.
fn no_delete(what: &str) -> PyErr {
    PyTypeError::new_err(format!("cannot delete {what}: set it to one of its values instead"))
}

pub fn set_sync_policy(s: StreamObject<'_>, py: Python<'_>, value: Option<Borrowed<'_, '_, PyAny>>) -> PyResult<()> {
    const WHAT: &str = "Stream.sync_policy";
    let v = value.ok_or_else(|| no_delete(WHAT))?;
    let index = chosen(py, &POLICY_NAMES, SyncPolicy::NAMES, &v, WHAT)?;
    s.set_sync_policy(py, SyncPolicy::ALL[index])
}

pub fn get_mem_sync_domain(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(named(
        py,
        &DOMAIN_NAMES,
        MemSyncDomain::NAMES,
        s.mem_sync_domain(py)?.name(),
    ))
}

pub fn set_mem_sync_domain(
    s: StreamObject<'_>,
    py: Python<'_>,
    value: Option<Borrowed<'_, '_, PyAny>>,
) -> PyResult<()> {
    const WHAT: &str = "Stream.mem_sync_domain";
    let v = value.ok_or_else(|| no_delete(WHAT))?;
    let domain = MemSyncDomain::ALL[chosen(py, &DOMAIN_NAMES, MemSyncDomain::NAMES, &v, WHAT)?];
    s.set_mem_sync_domain(py, domain)
}

/// `custream.AccessPolicyWindow`: a named tuple (address, nbytes, hit_ratio, hit, miss).
static WINDOW_TYPE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The `AccessPolicyWindow` type, made once (`lib.rs` registers it).
pub fn window_type(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    WINDOW_TYPE
        .get_or_try_init(py, || {
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("module", "custream")?;
            let t = py.import("collections")?.getattr("namedtuple")?.call(
                ("AccessPolicyWindow", ("address", "nbytes", "hit_ratio", "hit", "miss")),
                Some(&kwargs),
            )?;
            t.setattr(
                "__doc__",
                "A stream's L2 access-policy window, as ``Stream.access_policy_window`` reads it back:\n\
                 ``nbytes`` bytes from ``address`` (an int), of which a ``hit_ratio`` share (a float\n\
                 in [0, 1]) gets the ``hit`` property and the rest ``miss`` ('normal', 'streaming'\n\
                 or 'persisting').",
            )?;
            Ok::<_, PyErr>(t.unbind())
        })
        .map(|t| t.bind(py))
}

pub fn get_access_policy_window(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    let Some(w) = s.access_policy_window(py)? else {
        return Ok(py.None());
    };
    // The driver keeps a float: read back as the shortest decimal that is that float, so
    // that a ratio of 0.6 reads 0.6.
    let ratio: f64 = w.hit_ratio.to_string().parse().unwrap_or(f64::from(w.hit_ratio));
    let made = window_type(py)?.call1((w.base, w.bytes, ratio, w.hit.name(), w.miss.name()))?;
    Ok(made.unbind())
}

static WINDOW_SIG: Signature = Signature {
    name: "set_access_policy_window",
    positional: &["address", "nbytes"],
    keyword_only: &["hit_ratio", "hit", "miss"],
    required: 2,
};

pub fn set_access_policy_window(s: StreamObject<'_>, py: Python<'_>, args: Fastcall<'_, '_>) -> PyResult<Py<PyAny>> {
    const F: &str = "set_access_policy_window()";
    let [address, nbytes, hit_ratio, hit, miss] = WINDOW_SIG.parse_fastcall::<5>(&args)?;
    let address = address.ok_or_else(|| PyTypeError::new_err(format!("{F} missing required argument 'address'")))?;
    let nbytes = nbytes.ok_or_else(|| PyTypeError::new_err(format!("{F} missing required argument 'nbytes'")))?;
    let base = memops::address_of(&address, "set_access_policy_window")?;
    let bytes = nbytes_arg(&nbytes, F)?;
    let hit_ratio = match hit_ratio {
        None => 1.0,
        Some(r) => ratio_arg(&r, F)?,
    };
    let property = |v: Option<Bound<'_, PyAny>>, which: &str, default| match v {
        None => Ok(default),
        Some(v) => {
            Ok::<_, PyErr>(AccessProperty::ALL[choice_arg(&v, &format!("{F} {which}"), &AccessProperty::NAMES)?])
        }
    };
    let hit = property(hit, "hit", AccessProperty::Persisting)?;
    let miss = property(miss, "miss", AccessProperty::Streaming)?;
    let window = AccessPolicyWindow {
        base,
        bytes,
        hit_ratio,
        hit,
        miss,
    };
    s.set_access_policy_window(py, Some(window), F)?;
    Ok(py.None())
}

fn nbytes_arg(v: &Bound<'_, PyAny>, f: &str) -> PyResult<u64> {
    if !is_int_not_bool(v) {
        return Err(PyTypeError::new_err(format!(
            "{f} nbytes must be an int, got {}",
            v.get_type().name()?
        )));
    }
    match v.extract::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(PyValueError::new_err(format!(
            "{f} nbytes must be a positive number of bytes, got {} (clear_access_policy_window() removes a window)",
            int_repr(v)
        ))),
    }
}

fn ratio_arg(v: &Bound<'_, PyAny>, f: &str) -> PyResult<f32> {
    let r = match v.extract::<f64>() {
        Ok(r) if !v.is_instance_of::<PyBool>() => r,
        _ => {
            return Err(PyTypeError::new_err(format!(
                "{f} hit_ratio must be a number in [0, 1], got {}",
                v.get_type().name()?
            )))
        }
    };
    if !(0.0..=1.0).contains(&r) {
        return Err(PyValueError::new_err(format!(
            "{f} hit_ratio must be in [0, 1], got {}",
            short_repr(v)
        )));
    }
    Ok(r as f32)
}

pub fn clear_access_policy_window(s: StreamObject<'_>, py: Python<'_>) -> PyResult<Py<PyAny>> {
    s.set_access_policy_window(py, None, "clear_access_policy_window()")?;
    Ok(py.None())
}

pub fn copy_settings_from(
    s: StreamObject<'_>,
    py: Python<'_>,
    other: Option<Borrowed<'_, '_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let other = other.ok_or_else(|| PyTypeError::new_err("copy_settings_from() missing required argument 'other'"))?;
    let src = protocol::as_stream(&other).map_err(|e| {
        if e.is_instance_of::<PyTypeError>(py) {
            PyTypeError::new_err(format!(
                "copy_settings_from() other must be a custream.Stream or an object with __cuda_stream__(), got {}",
                other.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        } else {
            e
        }
    })?;
    s.copy_settings_from(py, StreamObject::of(&src, "copy_settings_from()")?)?;
    Ok(py.None())
}
