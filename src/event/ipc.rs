//! IPC events: an event one process records and another waits on. `Event(ipc=True)` makes
//! one (`CU_EVENT_INTERPROCESS`, timing off as CUDA requires), `e.ipc_handle()` is its
//! `IpcEventHandle` (the driver's 64 bytes, the exporter's pid and device, picklable), and
//! `Event.from_ipc_handle(h)` opens it in another process; an IPC event pickles to its handle.
//! Another library's handle (the driver's 64 bytes alone, with the device the caller names:
//! src/event/ipc_source.rs) opens here too, as an `IpcEventHandle` with no exporter in it.
//! The Event class composes these (src/event/cuda_event.rs); nothing here knows it.
//!
//! **The lifetime rule.** The driver's handle names the exporter's event, which lives while
//! the exporter keeps it open, and CUDA leaves a use of an imported event whose exporter
//! destroyed it undefined. custream stands between: the handle carries the exporter's pid,
//! the start time of that process and its pid namespace, so an importer in the same pid
//! namespace knows whether the exporter still runs, with no driver call. Opening the handle
//! of an exporter that has exited raises `CudaError` (`CUDA_ERROR_INVALID_HANDLE`) before the
//! driver is asked; an imported event's `query()` that finds the work not done while the
//! exporter is gone raises the same instead of answering False forever; its `synchronize()`
//! waits in slices (src/cpython/interrupt.rs), looking at the exporter between them, and raises
//! instead of hanging; `stream.wait()` on it refuses the same way when the work was not seen
//! done. Closing an imported event closes this process's use of it only (`cuEventDestroy` on
//! the imported handle): the exporter's event and the work recorded on it are not touched.
//! An importer in another pid namespace (another container) cannot see the exporter: there
//! the driver's own answers are all there is. So it is for another library's handle, which
//! carries no exporter to watch (its pid is 0 here, a pid no exporter has): a dead exporter's
//! event is the driver's to report, and `synchronize()` still waits in slices, bounded by
//! `timeout=` and Ctrl-C.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple, PyType};

use crate::cpython::interrupt::{self, Deadline};
use crate::driver::{self, Context, DriverError, EventHandle, OwnedEvent, IPC_HANDLE_BYTES};
use crate::object::home_context::Home;

/// The handle of an IPC event, for another process: ``e.ipc_handle()``.
///
/// Small and picklable (``multiprocessing`` queues and pipes carry it, as they carry the
/// IPC event itself); ``bytes(h)`` and ``IpcEventHandle.from_bytes(b)`` send it over any other
/// channel. ``Event.from_ipc_handle(h)`` opens the event in another process. ``pid`` and
/// ``device`` are the exporter's (the device is found again by its UUID in the importer,
/// whose ordinals may differ); ``handle`` is the driver's 64 bytes. The handle of an event
/// opened from another library's raw handle (``Event.from_ipc_handle(raw, device=...)``) has
/// no exporter to watch: its ``pid`` is None and ``device`` is the importer's ordinal.
#[pyclass(module = "custream", frozen)]
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct IpcEventHandle {
    handle: [u8; IPC_HANDLE_BYTES],
    pid: u32,
    device: i32,
    uuid: [u8; 16],
    /// The exporter's pid namespace (the inode of /proc/self/ns/pid), 0 where unknown.
    pid_namespace: u64,
    /// The exporter's start time (clock ticks after boot, /proc/<pid>/stat), 0 where unknown:
    /// with the pid, names the process even after its pid is reused.
    start_time: u64,
}

/// `bytes(h)`: this tag, then the fields in order, little-endian.
const MAGIC: &[u8; 8] = b"CSIPCEV1";
const PACKED: usize = 8 + IPC_HANDLE_BYTES + 4 + 4 + 16 + 8 + 8;

impl IpcEventHandle {
    fn pack(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(PACKED);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.handle);
        out.extend_from_slice(&self.pid.to_le_bytes());
        out.extend_from_slice(&self.device.to_le_bytes());
        out.extend_from_slice(&self.uuid);
        out.extend_from_slice(&self.pid_namespace.to_le_bytes());
        out.extend_from_slice(&self.start_time.to_le_bytes());
        out
    }

    fn unpack(data: &[u8]) -> Option<IpcEventHandle> {
        if data.len() != PACKED || &data[..8] != MAGIC {
            return None;
        }
        let (handle, rest) = data[8..].split_at(IPC_HANDLE_BYTES);
        let u32_at = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(rest[i..i + 8].try_into().expect("8 bytes"));
        Some(IpcEventHandle {
            handle: handle.try_into().ok()?,
            pid: u32_at(0),
            device: u32_at(4) as i32,
            uuid: rest[8..24].try_into().ok()?,
            pid_namespace: u64_at(24),
            start_time: u64_at(32),
        })
    }

    /// Whether the exporter still runs: `None` when this process cannot tell (another pid
    /// namespace, or no /proc).
    fn exporter_alive(&self) -> Option<bool> {
        if self.foreign() || self.pid_namespace == 0 || self.pid_namespace != pid_namespace() {
            return None;
        }
        Some(start_time_of(self.pid) == Some(self.start_time))
    }

    /// The handle of another library's event: the driver's 64 bytes and the device, with no
    /// exporter in it (pid 0).
    fn foreign(&self) -> bool {
        self.pid == 0
    }

    /// The error for a use of an event whose exporter has exited.
    fn exporter_gone(&self, what: &str) -> DriverError {
        driver::invalid_handle(format!(
            "{what}: the process that exported this IPC event (pid {}) has exited, and CUDA \
                 leaves the use of an IPC event after its exporter is gone undefined; the \
                 exporter must keep the event open until the importers are done with it",
            self.pid
        ))
    }
}

#[pymethods]
impl IpcEventHandle {
    /// The exporting process's pid; None for another library's handle, which names no
    /// exporter.
    #[getter]
    fn pid(&self) -> Option<u32> {
        (!self.foreign()).then_some(self.pid)
    }

    /// The exporter's device ordinal (in the exporter's numbering; for another library's
    /// handle, in the numbering of the process that opened it).
    #[getter]
    fn device(&self) -> i32 {
        self.device
    }

    /// The driver's handle (``CUipcEventHandle``): 64 bytes.
    #[getter]
    fn handle<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.handle)
    }

    /// The handle as bytes, for ``IpcEventHandle.from_bytes``.
    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.pack())
    }

    /// The handle ``bytes(h)`` gave.
    #[staticmethod]
    fn from_bytes(data: &Bound<'_, PyAny>) -> PyResult<IpcEventHandle> {
        let bytes = data.cast::<PyBytes>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "from_bytes() data must be bytes, got {}",
                data.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        })?;
        IpcEventHandle::unpack(bytes.as_bytes()).ok_or_else(|| {
            let raw = match bytes.as_bytes().len() {
                IPC_HANDLE_BYTES => {
                    ": a raw CUDA IPC event handle (PyTorch's, CuPy's) opens with \
                     Event.from_ipc_handle(raw, device=...)"
                }
                _ => "",
            };
            PyValueError::new_err(format!(
                "from_bytes() data is not a custream.IpcEventHandle (bytes(handle) is {PACKED} bytes \
                 starting with {:?}), got {} bytes{raw}",
                std::str::from_utf8(MAGIC).unwrap_or_default(),
                bytes.as_bytes().len()
            ))
        })
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let from_bytes = slf.get_type().getattr("from_bytes")?;
        Ok((from_bytes, PyTuple::new(py, [slf.get().__bytes__(py)])?))
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<IpcEventHandle>().is_ok_and(|o| o.get() == self)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut h);
        h.finish() >> 2
    }

    fn __repr__(&self) -> String {
        match self.foreign() {
            true => format!(
                "<custream.IpcEventHandle device={} raw CUDA handle, no exporter to watch>",
                self.device
            ),
            false => format!("<custream.IpcEventHandle pid={} device={}>", self.pid, self.device),
        }
    }
}

/// An Event's IPC side: the handle, and whether this process exported or imported it.
pub struct IpcSide {
    handle: IpcEventHandle,
    imported: bool,
    /// An importer's watch on the exporter, where one could be set up; shared by the events
    /// imported from one exporter.
    exporter: Option<Arc<Watch>>,
}

/// The exporting process, watched from an importer in its pid namespace: a pidfd (Linux 5.3),
/// which names that very process (never one that reuses its pid) and turns readable when it
/// exits, so a look is one `poll` with no wait.
struct Watch(std::os::fd::OwnedFd);

/// The watches on exporters, by pid and start time: the events an importer opens from one
/// exporter share one pidfd, and every import after the first costs one `poll`.
static WATCHES: Mutex<Vec<(Exporter, Weak<Watch>)>> = Mutex::new(Vec::new());

/// An exporter: its pid and its start time (a pid alone may be reused).
type Exporter = (u32, u64);

impl Watch {
    /// The watch on the process `handle` names, shared, if it runs (in this pid namespace)
    /// and the kernel has pidfds.
    fn shared(handle: &IpcEventHandle) -> Option<Arc<Watch>> {
        let key = (handle.pid, handle.start_time);
        let mut watches = WATCHES.lock().unwrap_or_else(PoisonError::into_inner);
        watches.retain(|(_, w)| w.strong_count() > 0);
        if let Some(w) = watches.iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade()) {
            return (!w.exited()).then_some(w);
        }
        let w = Arc::new(Watch::open(handle)?);
        watches.push((key, Arc::downgrade(&w)));
        Some(w)
    }

    /// A watch on the process `handle` names, if it runs and the kernel has pidfds.
    #[cfg(target_os = "linux")]
    fn open(handle: &IpcEventHandle) -> Option<Watch> {
        use std::os::fd::FromRawFd;
        let pid = libc::pid_t::try_from(handle.pid).ok()?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no memory.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let fd = std::os::fd::RawFd::try_from(fd).ok().filter(|&fd| fd >= 0)?;
        // SAFETY: a descriptor the kernel just gave us, owned by nobody else.
        let watch = Watch(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
        // The pid may have gone to another process before the pidfd was taken: check that it
        // names the exporter (its start time), now that the pidfd holds on to it.
        (handle.exporter_alive() == Some(true)).then_some(watch)
    }

    #[cfg(not(target_os = "linux"))]
    fn open(_: &IpcEventHandle) -> Option<Watch> {
        None
    }

    /// Whether the process has exited.
    fn exited(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut pfd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, alive for the call; a timeout of 0 never blocks.
        unsafe { libc::poll(&mut pfd, 1, 0) > 0 }
    }
}

impl IpcSide {
    pub fn handle(&self) -> IpcEventHandle {
        self.handle.clone()
    }

    pub fn imported(&self) -> bool {
        self.imported
    }

    /// Opened from another library's handle: no exporter to watch.
    pub fn foreign(&self) -> bool {
        self.handle.foreign()
    }

    /// The error to raise when the event was imported and its exporter is known to have
    /// exited: one `poll` of the watch, or a look at /proc without one.
    fn exporter_gone(&self, what: &str) -> Option<DriverError> {
        if !self.imported {
            return None;
        }
        let gone = match &self.exporter {
            Some(watch) => watch.exited(),
            None => self.handle.exporter_alive() == Some(false),
        };
        gone.then(|| self.handle.exporter_gone(what))
    }

    /// `query()` of an imported event: the work not done and the exporter gone is an error,
    /// not False forever.
    pub fn query(&self, ev: EventHandle, what: &str) -> driver::Result<bool> {
        let done = driver::event_query(ev)?;
        if !done {
            if let Some(gone) = self.exporter_gone(what) {
                // Done just before the exporter went?
                return if driver::event_query(ev)? { Ok(true) } else { Err(gone) };
            }
        }
        Ok(done)
    }

    /// A stream is about to wait on the imported event: refused when the exporter is gone
    /// and the work it recorded was not seen done (the stream could wait forever).
    pub fn before_wait(&self, ev: EventHandle, what: &str) -> driver::Result<()> {
        match self.exporter_gone(what) {
            Some(gone) if !driver::event_query(ev)? => Err(gone),
            _ => Ok(()),
        }
    }

    /// `synchronize()` of an imported event: polled in slices, with the GIL let go, the
    /// exporter looked at between polls; never a wait the exporter's exit leaves hanging.
    pub fn synchronize(&self, py: Python<'_>, ev: EventHandle, deadline: Deadline, what: &str) -> PyResult<()> {
        let mut failure: Option<DriverError> = None;
        interrupt::wait(py, deadline, what, |slice| {
            let start = Instant::now();
            let mut pause = Duration::from_micros(20);
            loop {
                match self.query(ev, what) {
                    Ok(true) => return Ok(true),
                    Ok(false) => {}
                    Err(e) => {
                        failure = Some(e);
                        return Ok(true);
                    }
                }
                if start.elapsed() >= slice {
                    return Ok(false);
                }
                std::thread::sleep(pause.min(slice.saturating_sub(start.elapsed())));
                pause = (pause * 2).min(Duration::from_millis(2));
            }
        })?;
        match failure {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

// The exporter, as the kernel reports it.

/// This process's pid namespace (the inode of /proc/self/ns/pid), 0 where unknown. Looked up
/// once: a process never changes its own (unshare and setns move only its later children).
fn pid_namespace() -> u64 {
    static NAMESPACE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NAMESPACE.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self/ns/pid").map(|m| m.ino()).unwrap_or(0)
        }
        #[cfg(not(target_os = "linux"))]
        0
    })
}

/// When process `pid` started (field 22 of /proc/<pid>/stat), None if there is no such process.
fn start_time_of(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// An interprocess event on `device` (timing off), made in its primary context, with the
/// handle that names it to other processes.
pub fn export(py: Python<'_>, device: i32) -> PyResult<(Home, OwnedEvent, IpcSide)> {
    let (home, (ev, handle, uuid)) = Home::make(py, device, None, move |ctx| {
        let ev = driver::event_create_interprocess(ctx)?;
        let named = driver::ipc_event_handle(ctx, ev.handle()).and_then(|h| Ok((h, driver::device_uuid(device)?)));
        match named {
            Ok((h, uuid)) => Ok((ev, h, uuid)),
            Err(e) => {
                let _ = ev.destroy(ctx);
                Err(e)
            }
        }
    })?;
    let pid = std::process::id();
    let side = IpcSide {
        handle: IpcEventHandle {
            handle,
            pid,
            device,
            uuid,
            pid_namespace: pid_namespace(),
            start_time: start_time_of(pid).unwrap_or(0),
        },
        imported: false,
        exporter: None,
    };
    Ok((home, ev, side))
}

/// Open the event `handle` names, in the primary context of the same device here.
pub fn import(py: Python<'_>, handle: &IpcEventHandle) -> PyResult<(Home, OwnedEvent, IpcSide)> {
    const WHAT: &str = "Event.from_ipc_handle()";
    // The watch says the exporter runs (one pidfd and one look at /proc); without one, /proc
    // alone may still say it is gone. Another library's handle names nobody to watch.
    let exporter = if handle.foreign() { None } else { Watch::shared(handle) };
    if exporter.is_none() && handle.exporter_alive() == Some(false) {
        return Err(handle.exporter_gone(WHAT).into());
    }
    let device = driver::device_with_uuid(&handle.uuid)?.ok_or_else(|| {
        driver::invalid_device(format!(
            "{WHAT}: the exporter's device (its device {}) is not visible in this process; \
                 the importer must see the same GPU (CUDA_VISIBLE_DEVICES)",
            handle.device
        ))
    })?;
    open(py, handle.clone(), device, exporter)
}

/// Open another library's event from the driver's 64 bytes on `device`, an ordinal this
/// process has (src/event/ipc_source.rs checked it). Its `IpcEventHandle` names the device by
/// UUID, so that the event pickles to it and opens again in a third process.
pub fn import_raw(py: Python<'_>, raw: [u8; IPC_HANDLE_BYTES], device: i32) -> PyResult<(Home, OwnedEvent, IpcSide)> {
    let handle = IpcEventHandle {
        handle: raw,
        pid: 0,
        device,
        uuid: driver::device_uuid(device)?,
        pid_namespace: 0,
        start_time: 0,
    };
    open(py, handle, device, None)
}

/// `cuIpcOpenEventHandle` in `device`'s primary context.
fn open(
    py: Python<'_>,
    handle: IpcEventHandle,
    device: i32,
    exporter: Option<Arc<Watch>>,
) -> PyResult<(Home, OwnedEvent, IpcSide)> {
    let raw = handle.handle;
    let (home, ev) = Home::make(py, device, None, move |ctx: Context| driver::ipc_open_event(ctx, &raw))?;
    Ok((
        home,
        ev,
        IpcSide {
            handle,
            imported: true,
            exporter,
        },
    ))
}

/// `__reduce__` of an IPC event: `Event.from_ipc_handle(handle)` in the process that unpickles.
pub fn reduce<'py>(
    cls: &Bound<'py, PyType>,
    handle: IpcEventHandle,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
    let py = cls.py();
    let open = cls.getattr("from_ipc_handle")?;
    Ok((open, PyTuple::new(py, [Bound::new(py, handle)?])?))
}

/// `Event(ipc=True, timing=True)`.
pub fn timing_refused() -> PyErr {
    PyValueError::new_err(
        "Event() ipc=True and timing=True cannot be combined: CUDA's interprocess events have no \
         timing (CU_EVENT_INTERPROCESS needs CU_EVENT_DISABLE_TIMING)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(pid: u32, start_time: u64) -> IpcEventHandle {
        IpcEventHandle {
            handle: std::array::from_fn(|i| i as u8),
            pid,
            device: 3,
            uuid: [7; 16],
            pid_namespace: pid_namespace(),
            start_time,
        }
    }

    #[test]
    fn bytes_round_trip_and_refuse_anything_else() {
        let h = handle(4242, 99);
        let packed = h.pack();
        assert_eq!(packed.len(), PACKED);
        assert_eq!(IpcEventHandle::unpack(&packed), Some(h));
        assert_eq!(IpcEventHandle::unpack(&packed[1..]), None);
        let mut wrong = packed.clone();
        wrong[0] = b'X';
        assert_eq!(IpcEventHandle::unpack(&wrong), None);
    }

    #[test]
    fn another_librarys_handle_has_no_exporter_to_watch() {
        let h = handle(0, 0);
        assert!(h.foreign());
        assert_eq!(h.exporter_alive(), None, "pid 0 is no exporter, in any pid namespace");
        assert_eq!(
            IpcEventHandle::unpack(&h.pack()),
            Some(h.clone()),
            "it pickles as any other"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_exporter_is_known_alive_or_gone_in_our_pid_namespace() {
        let me = std::process::id();
        let started = start_time_of(me).expect("this process's start time");
        assert_eq!(handle(me, started).exporter_alive(), Some(true));
        assert_eq!(
            handle(me, started + 1).exporter_alive(),
            Some(false),
            "another process with our pid"
        );
        let mut child = std::process::Command::new("true").spawn().expect("a child");
        let gone = child.id();
        child.wait().expect("it exits");
        assert_eq!(handle(gone, 1).exporter_alive(), Some(false));
        let mut elsewhere = handle(me, started);
        elsewhere.pid_namespace ^= 1;
        assert_eq!(elsewhere.exporter_alive(), None, "another pid namespace: unknown");
    }
}
