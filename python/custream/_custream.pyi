"""Type stubs for custream's extension module (re-exported by ``custream``)."""

from collections.abc import Generator
from concurrent.futures import Future
from types import TracebackType
from uuid import UUID
from typing import Any, Callable, ClassVar, Final, Literal, NamedTuple, Protocol, Sequence, final

__all__ = [
    "ABI_VERSION",
    "AccessPolicyWindow",
    "DEFAULT_STREAM",
    "FLAG_DEFAULT",
    "FLAG_GREEN",
    "FLAG_NON_BLOCKING",
    "FLAG_OWNED",
    "FLAG_POOLED",
    "FLAG_SHARED",
    "LEGACY_DEFAULT_STREAM",
    "PER_THREAD_DEFAULT_STREAM",
    "CudaError",
    "CudaUnavailableError",
    "Event",
    "GreenContext",
    "Lease",
    "Stream",
    "StreamPool",
    "as_stream",
    "current_stream",
    "device_count",
    "device_info",
    "driver_library_candidates",
    "driver_version",
    "is_available",
    "live_stream_count",
    "priority_range",
    "_Bell",
    "_finalize",
    "_pending_waits",
    "_notifier_streams",
    "__version__",
    "_C_API",
    "Graph",
    "HostFunction",
    "check_foreign_captures",
    "IpcEventHandle",
]

ABI_VERSION: Final[int]
FLAG_DEFAULT: Final[int]
FLAG_GREEN: Final[int]
FLAG_NON_BLOCKING: Final[int]
FLAG_OWNED: Final[int]
FLAG_POOLED: Final[int]
FLAG_SHARED: Final[int]
__version__: Final[str]
DEFAULT_STREAM: Final[Stream]
"""The null stream (handle 0) of the calling thread's current context; never closed."""
LEGACY_DEFAULT_STREAM: Final[Stream]
"""The legacy default stream (handle 1) of the calling thread's current context; never closed."""
PER_THREAD_DEFAULT_STREAM: Final[Stream]
"""The calling thread's per-thread default stream (handle 2); never closed."""

class CudaStreamProducer(Protocol):
    """Any object speaking the CUDA Stream Protocol (a typing-only name)."""

    def __cuda_stream__(self) -> tuple[int, int]: ...

class CudaError(RuntimeError):
    """A CUDA driver call failed. Attributes: ``code`` (the ``CUresult`` value), ``name``
    (e.g. ``CUDA_ERROR_INVALID_HANDLE``) and ``message`` (the driver's own description)."""

    code: int
    """The ``CUresult`` value."""
    name: str
    """The driver's name for it, e.g. ``CUDA_ERROR_INVALID_HANDLE``."""
    message: str
    """The driver's description."""

class CudaUnavailableError(RuntimeError):
    """No usable CUDA driver on this machine: none could be loaded (the message names the
    libraries looked for), or it is older than CUDA 12.0 (the message names its version).
    Wrapping handles and the protocol still work; anything that needs the driver raises
    this, except ``device_count()``, which is 0 without a driver library."""

_SyncPolicy = Literal["auto", "spin", "yield", "blocking"]
_AccessProperty = Literal["normal", "streaming", "persisting"]

class AccessPolicyWindow(NamedTuple):
    """A stream's L2 access-policy window, as ``Stream.access_policy_window`` reads it back:
    ``nbytes`` bytes from ``address`` (an int), of which a ``hit_ratio`` share (a float
    in [0, 1]) gets the ``hit`` property and the rest ``miss`` ('normal', 'streaming'
    or 'persisting')."""

    address: int
    nbytes: int
    hit_ratio: float
    hit: _AccessProperty
    miss: _AccessProperty

@final
class Stream:
    """A CUDA stream shared by Python, Cython and C, speaking the CUDA Stream Protocol.

    ``Stream()`` creates an owned stream in the device's primary context (``device`` defaults to
    the current context's device, else 0) and leaves the thread's current context as it was;
    with ``green_context=gc`` (a custream.GreenContext) it is made in that green context instead,
    its work running on that context's SMs only, and keeps ``gc`` open; it must then be
    non-blocking, and ``device`` left out or ``gc.device``. ``sync_policy`` ('auto', 'spin',
    'yield' or 'blocking') sets the stream's ``sync_policy`` as it is made.
    ``Stream.from_handle(handle, owner=...)`` and ``custream.as_stream(obj)`` wrap a stream
    somebody else made, keeping its owner alive. ``with s:`` makes ``s`` the current stream
    (``custream.current_stream()``) for the block and closes nothing. ``close()`` destroys an
    owned stream and lets go of a borrowed one's owner; after it, every handle accessor raises
    ValueError. Two Streams over one handle are equal (``==``, and their hashes); streams have
    no order (``<`` raises TypeError)."""

    def __new__(
        cls,
        *,
        device: int | None = None,
        non_blocking: bool = True,
        priority: int = 0,
        green_context: GreenContext | None = None,
        sync_policy: _SyncPolicy | None = None,
    ) -> Stream: ...
    @staticmethod
    def from_handle(handle: int, *, owner: object | None = None, device: int | None = None) -> Stream:
        """Wrap an existing CUDA stream handle (an int) without calling the driver.

        ``owner`` is kept alive until the stream is closed or deallocated; ``device``
        spares a driver call when ``.device`` is read. 0, 1 and 2 are the default-stream
        tokens (null, legacy, per-thread)."""
    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA Stream Protocol: (0, handle), both ints."""
    @property
    def handle(self) -> int:
        """The CUstream handle as an int (0, 1 and 2 are default-stream tokens)."""
    @property
    def device(self) -> int:
        """The device ordinal; for default streams, that of the current context. A wrapped
        stream's is asked of the driver once (cuStreamGetDevice where the driver has it, else
        the stream's context), never by changing the current context."""
    @property
    def id(self) -> int:
        """The driver's id of the stream (cuStreamGetId): an int unique in the process while
        the stream lives, the same for every Stream over one handle (CCCL's
        ``stream_ref::id()``). A default stream's is that of the current context's."""
    @property
    def owned(self) -> bool:
        """True if custream created the stream and destroys it on close."""
    @property
    def owner(self) -> Any:
        """The object kept alive for a borrowed stream, or None."""
    @property
    def is_default(self) -> bool:
        """True for the default-stream tokens 0, 1 and 2."""
    @property
    def non_blocking(self) -> bool:
        """True if the stream does not synchronize with the legacy default stream."""
    @property
    def priority(self) -> int:
        """The stream's priority (lower numbers run first)."""
    @property
    def flags(self) -> int:
        """The stream's CUSTREAM_FLAG_* bits (custream.h), fixed when the object is made, as
        custream's FLAG_* ints: FLAG_OWNED (custream made it and destroys it on close),
        FLAG_DEFAULT (a default-stream token: 0, 1 or 2), FLAG_NON_BLOCKING (owned streams),
        FLAG_SHARED (one of the module's default streams, never closed), FLAG_POOLED (made by a
        custream.StreamPool), FLAG_GREEN (made in a custream.GreenContext)."""
    @property
    def closed(self) -> bool:
        """True once close() has been called."""
    def synchronize(self, timeout: float | None = None) -> None:
        """Wait for all work queued on the stream so far, with the GIL released.

        ``timeout``: seconds (int or float), or None to wait as long as it takes; when the
        work is not done by then, ``TimeoutError`` (the stream and its work are untouched).
        On the main thread the wait ends within 50 ms of a signal whose handler raises
        (Ctrl-C's ``KeyboardInterrupt``), with that exception."""
    def query(self) -> bool:
        """True if all work on the stream is done, False if some is pending."""
    def wait(self, other: Event | Stream | CudaStreamProducer, /) -> None:
        """Make later work on this stream wait for ``other``: a custream.Event, or the
        work queued so far on a custream.Stream or any ``__cuda_stream__`` object."""
    def record(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new custream.Event if None) on this stream and return it."""
    def close(self) -> None:
        """Destroy an owned stream, or release a borrowed one's owner or deleter.
        Idempotent and thread-safe; afterwards every handle accessor raises ValueError.
        Refused (ValueError) for the module's default streams and for a StreamPool's streams."""
    def __enter__(self) -> Stream:
        """Make the stream current (custream.current_stream()) until the block ends."""
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> bool:
        """Make the stream that was current before the block current again; closes nothing."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def launch_host_func(self, fn: Callable[..., object], /, *args: Any) -> None:
        """Run ``fn(*args)`` on custream's host-function thread once the work queued on
        the stream before it is done; the work queued after it waits for it. Returns at once
        (unless about 1,000 are already pending on the stream: it then waits, GIL released).
        ``fn`` and ``args`` are kept alive until the call ran. An exception in ``fn`` goes to
        ``sys.unraisablehook``. ``fn`` must make no CUDA call (custream refuses one). In a
        capture the call becomes a host node, run at each launch of the graph."""
    def begin_capture(self, mode: Literal["thread_local", "global", "relaxed"] = "thread_local") -> None:
        """Begin capturing the work queued on this stream into a CUDA graph; ``mode`` is
        'thread_local', 'global' or 'relaxed' (CUDA's capture modes). End it with
        end_capture(). While it is open, synchronize() and query() on the stream raise
        CudaError instead of invalidating the capture."""
    def end_capture(self) -> Graph:
        """End the capture begun on this stream and return the instantiated custream.Graph."""
    def write_value(self, address: int | object, value: int, *, width: Literal[32, 64] = 32, flush: bool = False) -> None:
        """Write ``value`` (a ``width``-bit unsigned int, 32 or 64) to the word at ``address`` once
        the work queued on the stream before it is done (``cuStreamWriteValue32/64``). ``address``
        is an int GPU address or an array with ``__cuda_array_interface__`` or ``__dlpack__``
        (CuPy, PyTorch, Numba; its first element): device memory, or host memory mapped for the
        GPU, aligned to the width. The building block of a semaphore another stream, device or
        process waits on with ``wait_value()``. ``flush=True`` first flushes the remote writes that
        reached the device (``CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES``, where the platform supports it).
        A node of the graph in a capture."""
    def wait_value(
        self,
        address: int | object,
        value: int,
        *,
        width: Literal[32, 64] = 32,
        op: Literal["geq", "eq", "and", "nor"] = "geq",
        flush: bool = False,
    ) -> None:
        """Make the work queued on the stream after this wait until the word at ``address``
        meets ``op`` against ``value`` (``cuStreamWaitValue32/64``): 'geq' (``(int)(word - value)
        >= 0``, a greater-or-equal that survives the counter wrapping), 'eq', 'and' (``word & value
        != 0``) or 'nor' (``~(word | value) != 0``). ``flush=True`` follows the wait with a flush
        of remote writes (``CU_STREAM_WAIT_VALUE_FLUSH``, where the platform supports it). The
        host does not wait. ``address`` as for ``write_value()``. A node of the graph in a capture.
        Within one process, order the writer after this wait with an event too: the driver may
        queue the writer behind it (CUDA's warning; lazy module loading synchronizes the context)."""
    def keep_alive(self, *objs: object) -> None:
        """Hold references to ``objs`` until the work queued on the stream so far is done,
        then drop them on custream's own thread (never the driver's): a pinned host
        buffer, an array's storage or a capsule the queued work reads stays alive without a
        synchronize, and no Python runs in between. Returns at once. In a capture the
        references are tied to the graph instead, dropped once the graph and its executables
        are gone. After a fault of the stream's context they are dropped too (the GPU no longer
        runs); those still held when the interpreter exits are left to the process."""
    def set_access_policy_window(
        self,
        address: int | object,
        nbytes: int,
        *,
        hit_ratio: float = 1.0,
        hit: _AccessProperty = "persisting",
        miss: _AccessProperty = "streaming",
    ) -> None:
        """Set the stream's L2 access-policy window (``CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW``):
        for every kernel launched on the stream, by any library, a ``hit_ratio`` share of the
        ``nbytes`` bytes from ``address`` gets the ``hit`` property in L2 and the rest ``miss``
        ('normal', 'streaming' or 'persisting'). ``address`` as for ``write_value()``: an int or an
        array with ``__cuda_array_interface__`` or ``__dlpack__``. ``nbytes`` is at most the
        device's ``CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE`` (a device without a window:
        CudaError). Persisting lines need the context's persisting L2 set aside
        (``cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize)``)."""
    def clear_access_policy_window(self) -> None:
        """Remove the stream's L2 access-policy window (a window of 0 bytes, as CUDA resets it)."""
    def copy_settings_from(self, other: Stream | CudaStreamProducer, /) -> None:
        """Copy every setting of ``other`` (a custream.Stream or any ``__cuda_stream__``
        object) onto this stream: its sync_policy, access-policy window and memory
        synchronization domain (``cuStreamCopyAttributes``)."""
    @property
    def sync_policy(self) -> _SyncPolicy:
        """How a host thread waits for the stream: 'auto', 'spin', 'yield' or 'blocking'
        (``CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY``), kept by the driver on the stream, so it
        holds for every library's wait on the handle (``cudaStreamSynchronize``: CuPy's, PyTorch's).
        custream's own waits follow it: 'blocking' sleeps until the work is done, 'spin' polls and
        never sleeps, 'yield' polls yielding the CPU, 'auto' polls 20 ms and then sleeps. Read and
        set; the default streams refuse a write (ValueError)."""
    @sync_policy.setter
    def sync_policy(self, value: _SyncPolicy) -> None: ...
    @property
    def access_policy_window(self) -> AccessPolicyWindow | None:
        """The stream's L2 access-policy window as a custream.AccessPolicyWindow (address,
        nbytes, hit_ratio, hit, miss), or None when none is set. Set with
        set_access_policy_window(), removed with clear_access_policy_window()."""
    @property
    def mem_sync_domain(self) -> Literal["default", "remote"]:
        """The memory-synchronization domain of the stream's kernels, 'default' or 'remote'
        (``CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN``): a fence of a 'remote' kernel does not wait for
        the memory traffic of 'default' ones (NCCL's kernels use it). Read and set."""
    @mem_sync_domain.setter
    def mem_sync_domain(self, value: Literal["default", "remote"]) -> None: ...
    @property
    def is_capturing(self) -> bool:
        """True while the stream is capturing a CUDA graph (whoever began the capture)."""
    @property
    def green_context(self) -> GreenContext | None:
        """The custream.GreenContext the stream's work runs in, or None (the whole device).
        Any stream can be asked: one made in a green context by another library answers
        too (the driver is asked, and the green context adopted with the stream as owner)."""
    @property
    def sm_count(self) -> int:
        """How many SMs the stream's work may use: its green context's, else the device's."""

@final
class Event:
    """A CUDA event, created in a device's primary context.

    ``Event(*, device=None, timing=False, ipc=False)``: ``device`` defaults to the current
    context's device, else 0. Events are made without timing unless ``timing=True``, which
    ``elapsed_time`` needs. ``ipc=True`` makes an event other processes can open
    (``ipc_handle()``, ``Event.from_ipc_handle()``; timing must stay off), which pickles to
    its handle. ``close()`` destroys the event; so does deallocation."""

    def __new__(cls, *, device: int | None = None, timing: bool = False, ipc: bool = False) -> Event: ...
    def ipc_handle(self) -> IpcEventHandle:
        """The handle another process opens this IPC event with (``Event.from_ipc_handle``): a
        small picklable custream.IpcEventHandle. Raises ValueError for an event made without
        ``ipc=True``."""
    @staticmethod
    def from_ipc_handle(
        handle: IpcEventHandle | bytes | bytearray | memoryview | Any,
        *,
        device: int | str | bytes | UUID | Any | None = None,
    ) -> Event:
        """Open the IPC event another process exported, on the same GPU.

        ``handle``: a custream ``e.ipc_handle()``, which names its exporter and its device; or
        any library's raw 64-byte CUDA handle (``bytes``, ``bytearray`` or ``memoryview``:
        PyTorch's ``Event(interprocess=True).ipc_handle()``, CuPy's
        ``runtime.ipcGetEventHandle(e)``) or cuda.core's ``IPCEventDescriptor``, with
        ``device``, required then: the event's device as an ordinal of this process or its
        UUID (``uuid.UUID``, 16 bytes, ``'GPU-...'``). Bad input raises TypeError or
        ValueError naming the argument before the driver is asked.

        Its ``wait()`` (from a stream), ``record()``, ``synchronize()`` and ``query()`` work;
        ``close()`` ends this process's use and leaves the exporter's event as it is. The
        exporter must keep the event open while importers use it: custream's handle lets a use
        after it exited raise CudaError (see the Python guide's lifetime rule); a raw handle
        carries no exporter to watch, so there a dead exporter's event is the driver's to
        report, and ``synchronize()`` still waits in slices that ``timeout=`` and Ctrl-C end."""
    @property
    def ipc(self) -> bool:
        """True for an IPC event, made with ``ipc=True`` or opened from a handle."""
    def record(self, stream: Stream | CudaStreamProducer) -> None:
        """Record the event on ``stream`` (a custream.Stream or any ``__cuda_stream__`` object)."""
    def synchronize(self, timeout: float | None = None) -> None:
        """Wait until the work recorded before the event is done, with the GIL released.

        ``timeout``: seconds (int or float), or None to wait as long as it takes; when the
        work is not done by then, ``TimeoutError`` (the event and its work are untouched).
        On the main thread the wait ends within 50 ms of a signal whose handler raises
        (Ctrl-C's ``KeyboardInterrupt``), with that exception."""
    def __await__(self) -> Generator[Any, None, None]: ...
    def future(self) -> Future[None]:
        """A ``concurrent.futures.Future`` that completes (with None) once the work recorded
        before the event is done: for threads, other event loops
        (``asyncio.wrap_future``) and callbacks (``add_done_callback``, run on custream's
        own thread). Cancelling it only stops the waiting. A fault that kills the context
        fails it with the driver's error (``CudaError``) within about a second."""
    def query(self) -> bool:
        """True if the work recorded before the event is done."""
    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to ``end``; both need ``timing=True`` and must have
        completed."""
    @property
    def handle(self) -> int:
        """The CUevent handle as an int."""
    @property
    def device(self) -> int: ...
    @property
    def timing(self) -> bool: ...
    @property
    def closed(self) -> bool:
        """True once close() has been called."""
    def close(self) -> None:
        """Destroy the event; idempotent."""
    def __enter__(self) -> Event: ...
    def __exit__(self, *exc: object) -> bool: ...

@final
class IpcEventHandle:
    """The handle of an IPC event, for another process: ``e.ipc_handle()``.

    Small and picklable (``multiprocessing`` queues and pipes carry it, as they carry the
    IPC event itself); ``bytes(h)`` and ``IpcEventHandle.from_bytes(b)`` send it over any other
    channel. ``Event.from_ipc_handle(h)`` opens the event in another process. ``pid`` and
    ``device`` are the exporter's (the device is found again by its UUID in the importer,
    whose ordinals may differ); ``handle`` is the driver's 64 bytes. The handle of an event
    opened from another library's raw handle (``Event.from_ipc_handle(raw, device=...)``) has
    no exporter to watch: its ``pid`` is None and ``device`` is the importer's ordinal."""

    @property
    def pid(self) -> int | None:
        """The exporting process's pid; None for another library's handle, which names no
        exporter."""
    @property
    def device(self) -> int:
        """The exporter's device ordinal (in the exporter's numbering; for another library's
        handle, in the numbering of the process that opened it)."""
    @property
    def handle(self) -> bytes:
        """The driver's handle (``CUipcEventHandle``): 64 bytes."""
    def __bytes__(self) -> bytes:
        """The handle as bytes, for ``IpcEventHandle.from_bytes``."""
    @staticmethod
    def from_bytes(data: bytes) -> IpcEventHandle:
        """The handle ``bytes(h)`` gave."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class GreenContext:
    """A slice of a device's SMs (a CUDA green context, driver 12.4 and newer) to make streams
    in: their work runs on those SMs only.

    ``GreenContext(sm_count, *, device=None)`` asks the driver for at least ``sm_count`` SMs of
    ``device`` (default: the current context's device, else 0); the driver rounds the count up
    to its granularity (8 SMs on Hopper), and ``sm_count`` reports what it granted.
    ``GreenContext.split(sm_count, *, device=None)`` returns two disjoint ones: that slice and
    the rest of the device. ``GreenContext.from_handle(handle, *, owner=None)`` adopts another
    library's. Streams: ``gc.create_stream(priority=0)``, ``Stream(green_context=gc)``,
    ``StreamPool(n, green_context=gc)``. ``close()`` (idempotent; ``with`` closes too) refuses
    new streams at once; the driver's green context goes when its last stream is closed."""

    def __new__(cls, sm_count: int, *, device: int | None = None) -> GreenContext: ...
    @staticmethod
    def split(sm_count: int, *, device: int | None = None) -> tuple[GreenContext, GreenContext]:
        """Two disjoint green contexts of ``device`` (default: the current context's device,
        else 0): at least ``sm_count`` SMs, rounded up as the driver requires, and the rest.
        E.g. ``small, rest = GreenContext.split(16)`` on a 132-SM H200 gives 16 and 116."""
    @staticmethod
    def from_handle(handle: object, *, owner: object | None = None) -> GreenContext:
        """Adopt another library's green context: ``handle`` is a ``CUgreenCtx`` (an int or a
        cuda.bindings ``CUgreenCtx``), or the context converted from one (a cuda.bindings
        ``CUcontext``, such as cuda.core's ``Context.handle``), or a cuda.core ``Context``.
        ``owner`` is kept alive until ``close()`` (a cuda.core ``Context`` is its own owner
        unless one is given); custream never destroys an adopted green context."""
    def create_stream(self, *, priority: int = 0) -> Stream:
        """A new custream.Stream in this green context (non-blocking, as CUDA requires): its work
        runs on this green context's SMs only. The stream keeps the green context open."""
    @property
    def handle(self) -> int:
        """The ``CUgreenCtx`` handle as an int; raises once closed."""
    @property
    def device(self) -> int:
        """The device the green context's SMs belong to."""
    @property
    def sm_count(self) -> int:
        """The SMs the driver granted: at least the count asked for, rounded up as it requires."""
    @property
    def owned(self) -> bool:
        """True if custream made the green context and destroys it."""
    @property
    def owner(self) -> Any:
        """The object kept alive for an adopted green context, or None."""
    @property
    def closed(self) -> bool:
        """True once close() has been called."""
    def close(self) -> None:
        """Refuse new streams from now on and destroy the green context once its last stream is
        closed (now, if it has none); idempotent."""
    def __enter__(self) -> GreenContext: ...
    def __exit__(self, *exc: object) -> bool: ...

@final
class StreamPool:
    """Tiers of owned streams, one per priority, made on first use, handed out round-robin or
    leased.

    ``StreamPool(size, *, device=None, non_blocking=True, priority=0, priorities=None,
    green_context=None, sync_policy=None)`` holds ``size`` streams of each priority in
    ``priorities`` (or of the one ``priority``), in ``device``'s primary context (default: the
    current context's device, else 0), or in ``green_context`` (a custream.GreenContext) when
    given; each made with ``sync_policy`` ('auto', 'spin', 'yield' or 'blocking', as
    ``Stream.sync_policy``) when given. No stream is made
    (and no context touched) until one is asked for; the priorities are checked against the
    device's range then, as ``Stream()`` checks its own (CudaError).
    ``get(priority=None)`` hands a tier's streams out in turn (thread-safe, no lock);
    ``lease(priority=None, timeout=None)`` holds one that no other lease gets until its block
    ends, waiting (GIL released, Ctrl-C ends it) while all are leased. Without ``priority``
    both take the first tier given. ``pool[i]`` and ``len(pool)`` index every stream, tier
    after tier. A pool's stream is a plain custream.Stream to every consumer; it stays valid
    while the pool is open, and only ``pool.close()`` (idempotent) closes it, once every lease
    is given back."""
    def __new__(
        cls,
        size: int,
        *,
        device: int | None = None,
        non_blocking: bool = True,
        priority: int = 0,
        priorities: Sequence[int] | None = None,
        green_context: GreenContext | None = None,
        sync_policy: _SyncPolicy | None = None,
    ) -> StreamPool: ...
    def get(self, *, priority: int | None = None) -> Stream:
        """The next stream of the tier of ``priority`` (None: the first tier given),
        round-robin (thread-safe, no lock): one atomic add, once the stream is made. The
        same stream may go to several callers; ``lease()`` holds one for one caller."""
    def lease(self, *, priority: int | None = None, timeout: float | None = None) -> Lease:
        """A custream.Lease of one stream of the tier of ``priority`` (None: the first tier
        given) that no other lease holds until it is given back: ``with pool.lease() as s:``.
        When every stream of the tier is leased it waits, with the GIL released and Ctrl-C
        ending the wait, until one is given back, or raises TimeoutError after ``timeout``
        seconds (None: no limit). A closed pool refuses at once (ValueError), and wakes
        waiting leases with that error."""
    def __getitem__(self, index: int, /) -> Stream: ...
    def __len__(self) -> int: ...
    @property
    def device(self) -> int:
        """The device the pool's streams belong to."""
    @property
    def priorities(self) -> tuple[int, ...]:
        """The priority of each tier, in the order given."""
    @property
    def closed(self) -> bool:
        """True once close() has been called."""
    def close(self) -> None:
        """Close the pool: refuse ``get()`` and new leases at once, and close every stream once
        the last lease is given back (now, when none is held); idempotent."""

@final
class Lease:
    """One stream of a custream.StreamPool, held by one lease until it is given back.

    ``pool.lease(*, priority=None, timeout=None)`` returns one; ``with pool.lease() as s:``
    holds ``s`` for the block: no other lease gets it until the block ends (``pool.get()``,
    round-robin, does not look at leases). Giving it back does not wait for the work queued on
    it: the next holder's work follows it in stream order. After the block (or ``close()``)
    the lease refuses to be used (ValueError); the stream stays the pool's."""
    @property
    def stream(self) -> Stream:
        """The leased stream, while the lease is held."""
    @property
    def priority(self) -> int:
        """The priority of the pool's tier the stream comes from."""
    @property
    def closed(self) -> bool:
        """True once the lease was given back."""
    def close(self) -> None:
        """Give the stream back to the pool now (what the end of the ``with`` block does);
        idempotent. Its queued work runs on."""
    def __enter__(self) -> Stream:
        """The leased stream."""
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        """Give the stream back; the block's exception, if any, propagates."""

def current_stream() -> Stream:
    """The stream ``stream=None`` means: the innermost ``with s:`` block's stream in this
    thread or asyncio task, else ``DEFAULT_STREAM`` (``PER_THREAD_DEFAULT_STREAM`` when
    ``CUSTREAM_PER_THREAD_DEFAULT_STREAM=1``). It is the context variable's own ``get``."""

def priority_range(device: int | None = None) -> tuple[int, int]:
    """``(least, greatest)`` stream priorities of a device (default: the current context's,
    else 0). Greatest is the numerically lowest: ``Stream(priority=greatest)`` runs first."""

def as_stream(obj: Stream | CudaStreamProducer, /) -> Stream:
    """Return ``obj`` as a custream.Stream: a Stream as is, otherwise a borrowed Stream over
    the handle ``obj.__cuda_stream__()`` returns, keeping ``obj`` alive as its owner."""

def is_available() -> bool:
    """True if the CUDA driver loads and initializes (there is at least one device). Never raises."""

def driver_version() -> int:
    """The CUDA driver's version as an int, e.g. 13000 for CUDA 13.0."""

def device_count() -> int:
    """The number of CUDA devices; 0 where there is no driver library (as PyTorch and JAX answer)
    or the driver finds no device (``CUDA_ERROR_NO_DEVICE``, e.g. ``CUDA_VISIBLE_DEVICES=""``).
    A driver that is there but unusable (too old, failing to initialize) raises."""

def device_info(device: int) -> tuple[str, int, tuple[int, int]]:
    """Name, total memory in bytes and compute capability of a device, for reports."""

def driver_library_candidates() -> list[str]:
    """The library names custream looks for when it loads the CUDA driver, in order
    (``CUSTREAM_LIBCUDA`` alone when that is set)."""

def live_stream_count() -> int:
    """The number of custream.Stream objects alive in this process (for leak tests), not
    counting the module's three default streams."""

@final
class _Bell:
    """An event loop's bell, for `python/custream/_waits.py`: ``fileno()`` for
    ``loop.add_reader``, ``take()`` for the tokens of the awaits that rang since (a token
    with ``ORPHANED`` set: that await's wait was abandoned)."""

    ORPHANED: ClassVar[int]
    def __new__(cls) -> _Bell: ...
    def fileno(self) -> int: ...
    def take(self) -> list[int]:
        """The tokens rung since the last call (the eventfd drained first)."""

def _pending_waits() -> int:
    """Waits armed (a synchronize, an await, a future) whose driver notification has not come
    yet; for tests: a finished or cancelled wait leaves none once the GPU passed its event."""

def _notifier_streams() -> int:
    """The streams custream made for its own waits (notifiers and their bells), kept for the
    process; for tests that count the driver's streams."""

def _finalize() -> None:
    """Registered with atexit: from here on no Stream, Event or Graph calls into the driver,
    and no host function enters Python; those already inside it are waited for."""

_C_API: object

@final
class Graph:
    """An executable CUDA graph: what ``Stream.end_capture()`` returns.

    ``g.launch(stream)`` runs it on any stream (a custream.Stream or any ``__cuda_stream__``
    object), ``g.upload(stream)`` prepares it there ahead of a launch, ``close()`` destroys it
    (idempotent; launches in flight finish first). It lives in the context of the stream it
    was captured on, and is destroyed there exactly once: never after interpreter
    finalization began, never in a forked child."""

    def launch(self, stream: Stream | CudaStreamProducer) -> None:
        """Launch the graph on ``stream`` (a custream.Stream or any ``__cuda_stream__`` object):
        it runs after the work queued there before, and later work waits for it."""
    def upload(self, stream: Stream | CudaStreamProducer) -> None:
        """Upload the graph's work to the device on ``stream`` ahead of its first launch."""
    @property
    def handle(self) -> int:
        """The CUgraphExec handle as an int."""
    @property
    def device(self) -> int:
        """The device of the context the graph was captured and instantiated in."""
    @property
    def node_count(self) -> int:
        """The number of nodes the capture recorded."""
    @property
    def closed(self) -> bool:
        """True once close() has been called."""
    def close(self) -> None:
        """Destroy the executable graph (launches in flight finish first); idempotent."""
    def __enter__(self) -> Graph: ...
    def __exit__(self, *exc: object) -> bool: ...

@final
class HostFunction:
    """The object `sys.unraisablehook` gets for an exception raised by a host function: its
    repr names the function and the stream; ``function``, ``args`` and ``stream`` (the
    handle, an int) are attributes."""

    @property
    def function(self) -> Any: ...
    @property
    def args(self) -> tuple[Any, ...]: ...
    @property
    def stream(self) -> int: ...

def check_foreign_captures(enabled: bool | None = None) -> bool:
    """Whether custream asks the driver, before each ``query()`` and ``synchronize()``, if the
    stream is capturing a CUDA graph that another library began on the same handle, and then
    refuses instead of letting the driver invalidate that capture. Off by default: it costs
    one driver call on those fast paths. Captures begun through custream are always guarded.

    ``check_foreign_captures()`` returns the setting; ``check_foreign_captures(True)`` (or
    False) sets it and returns the previous one."""
