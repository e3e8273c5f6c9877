"""Type stubs for custream's extension module (re-exported by ``custream``)."""

from types import TracebackType
from typing import Any, Callable, Final, Literal, Protocol, final

__all__ = [
    "ABI_VERSION",
    "DEFAULT_STREAM",
    "LEGACY_DEFAULT_STREAM",
    "PER_THREAD_DEFAULT_STREAM",
    "CudaError",
    "CudaUnavailableError",
    "Event",
    "GreenContext",
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
    "_finalize",
    "__version__",
    "_C_API",
    "Graph",
    "HostFunction",
    "check_foreign_captures",
]

ABI_VERSION: Final[int]
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
    """A CUDA driver call failed."""

    code: int
    """The ``CUresult`` value."""
    name: str
    """The driver's name for it, e.g. ``CUDA_ERROR_INVALID_HANDLE``."""
    message: str
    """The driver's description."""

class CudaUnavailableError(RuntimeError):
    """No usable CUDA driver: none could be loaded (the message names the libraries looked
    for), or it is older than CUDA 12.0 (the message names its version)."""

@final
class Stream:
    """A CUDA stream shared by Python, Cython and C, speaking the CUDA Stream Protocol.

    ``Stream()`` creates an owned stream in the device's primary context (``device``
    defaults to the current context's device, else 0) and leaves the thread's current
    context as it was. ``Stream.from_handle`` and ``custream.as_stream`` wrap a stream
    somebody else made, keeping its owner alive. After ``close()`` every handle accessor
    raises ValueError.
    """

    def __new__(
        cls,
        *,
        device: int | None = None,
        non_blocking: bool = True,
        priority: int = 0,
        green_context: GreenContext | None = None,
    ) -> Stream:
        """``green_context=gc`` makes the stream in that green context (on its SMs only); it
        must then be non-blocking, and ``device`` left out or ``gc.device``."""
    @staticmethod
    def from_handle(handle: int, *, owner: object | None = None, device: int | None = None) -> Stream:
        """Wrap an existing CUDA stream handle (an int) without calling the driver.

        ``owner`` is kept alive until the stream is closed or deallocated. 0, 1 and 2 are
        the default-stream tokens (null, legacy, per-thread).
        """
    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA Stream Protocol: ``(0, handle)``."""
    @property
    def handle(self) -> int:
        """The ``CUstream`` handle as an int."""
    @property
    def device(self) -> int:
        """The device ordinal; for default streams, that of the current context."""
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
    def closed(self) -> bool:
        """True once ``close()`` has been called."""
    def synchronize(self) -> None:
        """Wait for all work on the stream; the GIL is released while waiting."""
    def query(self) -> bool:
        """True if all work on the stream is done."""
    def wait(self, other: Event | Stream | CudaStreamProducer, /) -> None:
        """Make later work on this stream wait for ``other``'s recorded or queued work."""
    def record(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if None) on this stream and return it."""
    def close(self) -> None:
        """Destroy an owned stream or release a borrowed one's owner; idempotent. Refused for
        the module's default streams and for a StreamPool's streams."""
    def __enter__(self) -> Stream:
        """Make the stream current (``current_stream()``) until the block ends."""
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> bool:
        """Make the stream current before the block current again; closes nothing."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def launch_host_func(self, fn: Callable[..., object], /, *args: Any) -> None:
        """Run ``fn(*args)`` on custream's host-function thread once the work queued before it is done."""
    def begin_capture(self, mode: Literal["thread_local", "global", "relaxed"] = "thread_local") -> None:
        """Begin capturing the work queued on this stream into a CUDA graph."""
    def end_capture(self) -> Graph:
        """End the capture and return the instantiated graph."""
    @property
    def is_capturing(self) -> bool:
        """True while the stream is capturing a CUDA graph, whoever began the capture."""
    @property
    def green_context(self) -> GreenContext | None:
        """The green context the stream's work runs in, or None (the whole device); any stream
        can be asked, another library's too."""
    @property
    def sm_count(self) -> int:
        """How many SMs the stream's work may use: its green context's, else the device's."""

@final
class Event:
    """A CUDA event in a device's primary context; ``timing=True`` enables ``elapsed_time``."""

    def __new__(cls, *, device: int | None = None, timing: bool = False) -> Event: ...
    def record(self, stream: Stream | CudaStreamProducer) -> None:
        """Record the event on ``stream``."""
    def synchronize(self) -> None:
        """Wait for the recorded work (the GIL is released)."""
    def query(self) -> bool:
        """True if the recorded work is done."""
    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (both made with ``timing=True``)."""
    @property
    def handle(self) -> int: ...
    @property
    def device(self) -> int: ...
    @property
    def timing(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None:
        """Destroy the event; idempotent."""
    def __enter__(self) -> Event: ...
    def __exit__(self, *exc: object) -> bool: ...

@final
class GreenContext:
    """A slice of one device's SMs (a CUDA green context, driver 12.4 and newer) to make streams
    in: their work runs on those SMs only.

    ``GreenContext(sm_count)`` asks the driver for at least ``sm_count`` SMs (it rounds up to
    its granularity, 8 SMs on Hopper); ``sm_count`` reports what it granted. ``close()``
    refuses new streams at once; the driver's green context goes when its last stream is closed.
    """

    def __new__(cls, sm_count: int, *, device: int | None = None) -> GreenContext: ...
    @staticmethod
    def split(sm_count: int, *, device: int | None = None) -> tuple[GreenContext, GreenContext]:
        """Two disjoint green contexts: at least ``sm_count`` SMs, and the rest of the device."""
    @staticmethod
    def from_handle(handle: object, *, owner: object | None = None) -> GreenContext:
        """Adopt another library's green context (a ``CUgreenCtx``, the context converted from
        one, or a cuda.core ``Context``), keeping ``owner`` alive; never destroyed by custream."""
    def create_stream(self, *, priority: int = 0) -> Stream:
        """A new Stream in this green context; it keeps the green context open."""
    @property
    def handle(self) -> int:
        """The ``CUgreenCtx`` handle as an int."""
    @property
    def device(self) -> int: ...
    @property
    def sm_count(self) -> int:
        """The SMs the driver granted."""
    @property
    def owned(self) -> bool:
        """True if custream made the green context and destroys it."""
    @property
    def owner(self) -> Any:
        """The object kept alive for an adopted green context, or None."""
    @property
    def closed(self) -> bool: ...
    def close(self) -> None:
        """Refuse new streams; the green context is destroyed once its last stream is closed."""
    def __enter__(self) -> GreenContext: ...
    def __exit__(self, *exc: object) -> bool: ...

@final
class StreamPool:
    """``size`` owned streams made up front, handed out round-robin; ``close()`` closes them all."""
    def __new__(
        cls,
        size: int,
        *,
        device: int | None = None,
        non_blocking: bool = True,
        priority: int = 0,
        green_context: GreenContext | None = None,
    ) -> StreamPool: ...
    def get(self) -> Stream:
        """The next stream, round-robin (thread-safe, no lock)."""
    def __getitem__(self, index: int, /) -> Stream: ...
    def __len__(self) -> int: ...
    @property
    def device(self) -> int:
        """The device the pool's streams belong to."""
    @property
    def closed(self) -> bool:
        """True once close() has been called."""
    def close(self) -> None:
        """Close every stream of the pool; idempotent."""

def current_stream() -> Stream:
    """The stream ``stream=None`` means: the innermost ``with s:`` block's stream in this
    thread or asyncio task, else ``DEFAULT_STREAM`` (``PER_THREAD_DEFAULT_STREAM`` when
    ``CUSTREAM_PER_THREAD_DEFAULT_STREAM=1``). It is the context variable's own ``get``."""

def priority_range(device: int | None = None) -> tuple[int, int]:
    """``(least, greatest)`` stream priorities of a device; greatest is the numerically lowest."""

def as_stream(obj: Stream | CudaStreamProducer, /) -> Stream:
    """``obj`` as a Stream: a Stream as is, else a borrowed Stream owning ``obj``."""

def is_available() -> bool:
    """True if the CUDA driver loads and has at least one device; never raises."""

def driver_version() -> int:
    """The driver's CUDA version, e.g. 13000 for 13.0."""

def device_count() -> int:
    """The number of CUDA devices."""

def device_info(device: int) -> tuple[str, int, tuple[int, int]]:
    """(name, total memory in bytes, (major, minor) compute capability)."""

def driver_library_candidates() -> list[str]:
    """The library names custream tries when it loads the driver."""

def live_stream_count() -> int:
    """The number of Stream objects alive in this process."""

def _finalize() -> None: ...

_C_API: object

@final
class Graph:
    """An executable CUDA graph, as ``Stream.end_capture()`` returns it."""

    def launch(self, stream: Stream | CudaStreamProducer) -> None:
        """Launch the graph on ``stream``."""
    def upload(self, stream: Stream | CudaStreamProducer) -> None:
        """Upload the graph's work to the device on ``stream`` ahead of a launch."""
    @property
    def handle(self) -> int: ...
    @property
    def device(self) -> int: ...
    @property
    def node_count(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None:
        """Destroy the executable graph; idempotent."""
    def __enter__(self) -> Graph: ...
    def __exit__(self, *exc: object) -> bool: ...

@final
class HostFunction:
    """What ``sys.unraisablehook`` gets as ``object`` when a host function raises."""

    @property
    def function(self) -> Any: ...
    @property
    def args(self) -> tuple[Any, ...]: ...
    @property
    def stream(self) -> int: ...

def check_foreign_captures(enabled: bool | None = None) -> bool:
    """Whether query() and synchronize() first ask the driver about captures other libraries
    began; with a bool, set it and return the previous setting."""
