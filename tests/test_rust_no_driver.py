"""pyo3-custream without a usable CUDA driver: every public function of the crate answers with
a Python exception of custream's (or a value), never a Rust panic (pyo3's PanicException,
which ``except Exception`` does not catch). Driven through the test extension tests/rust_ext,
as tests/test_rust_crate.py drives the rest of the crate.

cudarc (the crate's ``cudarc`` feature) loads libcuda on its own, by its own list of names,
and panics where it finds none or the one it finds lacks an entry point; ``with_cudarc``
turns both into ``custream.CudaUnavailableError`` and a failed driver call into
``custream.CudaError``. The last two cases run in a pytest process of their own against a small
libcuda.so of this test's own on the library path: one that lacks what cudarc calls, and one
whose cuInit says there is no device.
"""

import atexit
import ctypes.util
import gc
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

import custream
from custream import Stream

import standin
from _rust_ext import load_ext

CRATE = Path(__file__).resolve().parent.parent / "pyo3-custream"
H = 0x7F3A2C001230
NO_DRIVER = pytest.mark.skipif(
    custream.is_available() or ctypes.util.find_library("cuda") is not None, reason="a CUDA driver is present"
)


@pytest.fixture
def rx():
    ext = load_ext()
    ext.reset()
    yield ext
    gc.collect()


# Each public function of the crate (`pub fn` in pyo3-custream/src, ffi.rs aside: its layout
# only), the call of the test extension that reaches it, and what that call gives without a
# driver: a value's type, or the exception.
PUBLIC = {
    "import": (lambda rx, s: rx.import_custream(), int),
    "current_stream": (lambda rx, s: rx.current(), Stream),
    "to_python": (lambda rx, s: rx.give(H), Stream),
    "share": (lambda rx, s: rx.share_owner(H), Stream),
    "with_cudarc": (lambda rx, s: rx.cudarc_ordinal(0, False), custream.CudaUnavailableError),
    # The stream it takes comes out of with_cudarc, which raises first.
    "from_cudarc": (lambda rx, s: rx.cudarc_stream(0, 0, 0, 0.0, 0), custream.CudaUnavailableError),
    "as_cu_stream": (lambda rx, s: rx.cu_stream_of(s), int),
    "from_bound": (lambda rx, s: rx.from_bound(s), Stream),
    "from_handle": (lambda rx, s: rx.from_handle(H), Stream),
    "handle": (lambda rx, s: rx.info(s), tuple),
    "device": (lambda rx, s: rx.info(s), tuple),
    "is_closed": (lambda rx, s: rx.info(s), tuple),
    "resolve_device": (lambda rx, s: rx.id_and_device(s), custream.CudaUnavailableError),
    "id": (lambda rx, s: rx.id_and_device(s), custream.CudaUnavailableError),
    "synchronize": (lambda rx, s: rx.synchronize(s), custream.CudaUnavailableError),
    "synchronize_timeout": (lambda rx, s: rx.synchronize_timeout(s, 0.5), custream.CudaUnavailableError),
    "write_value": (lambda rx, s: rx.write_value(s, 0x1000, 1, 32), custream.CudaUnavailableError),
    "wait_value": (lambda rx, s: rx.wait_value(s, 0x1000, 1, 32, "geq"), custream.CudaUnavailableError),
    "release_after": (lambda rx, s: rx.release_after(s, b"x"), custream.CudaUnavailableError),
    "event_from_ipc_handle": (lambda rx, s: rx.event_from_ipc_handle(b"\0" * 64, 0), custream.CudaUnavailableError),
    "close": (lambda rx, s: rx.close(s), bool),
    "clone_ref": (lambda rx, s: rx.views(s), bool),
    "as_py": (lambda rx, s: rx.views(s), bool),
    "bind": (lambda rx, s: rx.views(s), bool),
    "into_py_any": (lambda rx, s: rx.views(s), bool),
    "from_raw": (lambda rx, s: rx.raw_round_trip(H), int),
    "as_raw": (lambda rx, s: rx.raw_round_trip(H), int),
    "as_handle": (lambda rx, s: rx.views(s), bool),
    "as_usize": (lambda rx, s: rx.handle_of(s), int),
    "is_default": (lambda rx, s: rx.is_default(s), bool),
}


def test_every_public_function_is_called_here():
    sources = [p for p in sorted((CRATE / "src").glob("*.rs")) if p.name != "ffi.rs"]
    public = {name for p in sources for name in re.findall(r"^\s*pub fn (\w+)", p.read_text(), re.M)}
    assert public == set(PUBLIC)


@NO_DRIVER
@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_without_a_driver_no_public_function_panics(rx, name):
    call, gives = PUBLIC[name]
    s = Stream.from_handle(H)
    if isinstance(gives, type) and issubclass(gives, BaseException):
        with pytest.raises(gives) as e:
            call(rx, s)
        if gives is custream.CudaUnavailableError:
            assert str(e.value).startswith("no CUDA driver"), e.value
    else:
        assert isinstance(call(rx, s), gives)


@NO_DRIVER
def test_with_cudarc_names_what_cudarc_looked_for(rx):
    with pytest.raises(custream.CudaUnavailableError, match=r"^no CUDA driver: cudarc could not load libcuda \(looked for libcuda\.so, .*libcuda\.so\.1\); install the NVIDIA driver"):
        rx.cudarc_ordinal(0, False)
    for call in (lambda: rx.scale(Stream.from_handle(H), 0, 0, 0, 1.0, 0.0),
                 lambda: rx.fill_slow(Stream.from_handle(H), 0, 0, 0, 1.0, 0)):
        with pytest.raises(custream.CudaUnavailableError):
            call()


FAKE_LIBCUDA = """
typedef int CUresult;
CUresult cuInit(unsigned flags) { (void)flags; return NO_DEVICE ? 100 : 0; }  /* CUDA_ERROR_NO_DEVICE */
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "no CUDA-capable device is detected"; return 0; }
"""


def fake_driver(folder: Path, no_device: bool) -> dict:
    """The environment of a process whose cudarc finds `folder`/libcuda.so: a library with
    only cuInit (saying no device, if `no_device`) and cuGetErrorString."""
    folder.mkdir()
    standin.compile_library(FAKE_LIBCUDA, folder / "libcuda.so", f"-DNO_DEVICE={int(no_device)}")
    return {"LD_LIBRARY_PATH": str(folder), "CUSTREAM_LIBCUDA": str(folder / "libcuda.so")}


def _driver(no_device):
    """The environment of a test process whose cudarc finds a library of `fake_driver`'s."""
    def environment():
        load_ext()  # built (or skipped) here, not in the test's process under its timeout
        folder = Path(tempfile.mkdtemp(prefix="custream-fake-libcuda-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        return fake_driver(folder / "lib", no_device=no_device)
    return environment


# cudarc's panic and the closure's are written to stderr as they are caught: the test is about them.
@pytest.mark.isolated(env=_driver(no_device=False), allow=("panicked",))
def test_a_driver_cudarc_cannot_use_is_cuda_unavailable(rx):
    """cudarc panics on an entry point the library lacks (here cuDeviceGet, its second call):
    the panic stays in Rust; a panic of the closure's own passes through as pyo3's."""
    with pytest.raises(custream.CudaUnavailableError) as e:
        rx.cudarc_ordinal(0, False)
    assert "the CUDA driver cudarc loaded cannot be used (Missing symbol cuDeviceGet" in str(e.value), e.value
    assert "a driver for CUDA 12.0 or newer is needed" in str(e.value), e.value
    with pytest.raises(BaseException) as e:
        rx.cudarc_ordinal(0, True)
    assert (type(e.value).__name__, str(e.value)) == ("PanicException", "the closure's own panic"), e.value


@pytest.mark.isolated(env=_driver(no_device=True))  # custream and cudarc open the library at import and first use
def test_a_failed_driver_call_is_custreams_cuda_error(rx):
    with pytest.raises(custream.CudaError) as e:
        rx.cudarc_ordinal(0, False)
    assert (e.value.code, e.value.name, e.value.message, str(e.value)) == (
        100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected",
        "CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected")
