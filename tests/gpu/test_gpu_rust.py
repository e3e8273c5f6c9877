"""The Rust face on a real device (pyo3-custream, through tests/rust_ext): a cudarc kernel
launched on a PyTorch and on a CuPy stream taken as a `StreamRef`, its result read by the
peer on that same stream with no synchronize between; and a cudarc `CudaStream` given to
Python with `from_cudarc`, CuPy work ordered after the Rust work on it, its `Arc` released
once by `close()`.

The kernels are PTX text loaded with cuModuleLoadData (tests/rust_ext/src/gpu.rs): no toolkit
at build or run time. The extension is built where Rust is (scripts/build/build-rust-ext.sh dist)
and installed by scripts/gpu-check.sh; without it these tests skip.
"""

import pytest

import custream
from _rust_ext import load_ext
from custream_gpu_helpers import peer

pytestmark = pytest.mark.gpu

N = 1 << 16
# Each thread of fill_slow spins this many clock cycles (~25 ms at 2 GHz) before it writes:
# work queued after it on another stream, unordered, would read the old values.
SPIN = 50_000_000


@pytest.fixture
def rx():
    return load_ext()


def stream_arg(peer_stream):
    """The peer's stream as the Rust functions take it: itself where it speaks the protocol,
    else a custream Stream borrowing its handle (and keeping it alive)."""
    if hasattr(peer_stream, "__cuda_stream__"):
        return peer_stream
    handle = getattr(peer_stream, "cuda_stream", None) or peer_stream.ptr
    return custream.Stream.from_handle(handle, owner=peer_stream, device=0)


def test_a_cudarc_kernel_on_a_torch_stream_read_by_torch_on_it(rx):
    torch = peer("torch")
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} sees no CUDA device")
    x = torch.zeros(N, dtype=torch.float32, device="cuda:0")
    torch.cuda.synchronize(0)
    s = torch.cuda.Stream(device=0)
    arg = stream_arg(s)
    rx.fill_slow(arg, 0, x.data_ptr(), N, 3.0, SPIN)  # Rust: x = 3 after a spin
    assert s.query() is False  # queued, not waited for
    rx.scale(arg, 0, x.data_ptr(), N, 2.0, 1.0)  # Rust: x = x * 2 + 1, after it
    with torch.cuda.stream(s):
        y = x.clone()  # torch, on the same stream: after both kernels, no synchronize
        total = y.sum()
    s.synchronize()
    assert bool(torch.all(y == 7.0)) and float(total) == 7.0 * N


def test_a_cudarc_kernel_on_a_cupy_stream_read_by_cupy_on_it(rx):
    cp = peer("cupy")
    x = cp.zeros(N, dtype=cp.float32)
    cp.cuda.Device(0).synchronize()
    s = cp.cuda.Stream(non_blocking=True)
    arg = stream_arg(s)
    rx.fill_slow(arg, 0, x.data.ptr, N, 3.0, SPIN)
    assert s.done is False
    rx.scale(arg, 0, x.data.ptr, N, 2.0, 1.0)
    with s:
        y = x.copy()  # CuPy, on the same stream
        total = y.sum()
    s.synchronize()
    assert bool((y == 7.0).all()) and float(total) == 7.0 * N


def test_a_cudarc_kernel_on_a_custream_stream(rx):
    cp = peer("cupy")
    x = cp.zeros(N, dtype=cp.float32)
    cp.cuda.Device(0).synchronize()
    with custream.Stream(device=0) as s:  # with: the current stream for the block
        rx.fill_slow(s, 0, x.data.ptr, N, 4.0, SPIN)
        assert s.query() is False
        with cp.cuda.Stream.from_external(s):
            y = x + 1
        s.synchronize()
        assert bool((y == 5.0).all())
        del y  # CuPy's pool keys memory by stream: none left on a stream about to go
    s.close()


def test_a_cudarc_stream_given_to_python_orders_cupy_after_rust(rx):
    cp = peer("cupy")
    x = cp.zeros(N, dtype=cp.float32)
    cp.cuda.Device(0).synchronize()
    s = rx.cudarc_stream(0, x.data.ptr, N, 5.0, SPIN)  # fill_slow queued on a cudarc stream
    assert type(s) is custream.Stream and not s.owned and s.device == 0
    assert rx.cudarc_strong_count() == 1  # Python holds the only Arc
    assert s.query() is False  # the Rust work is still running
    with cp.cuda.Stream.from_external(s):
        y = x * 2 + 1  # CuPy work, ordered after the Rust work by the stream
    s.synchronize()
    assert bool((y == 11.0).all())
    del y  # CuPy's pool keys memory by stream: none left on a stream about to go
    s.close()  # Python's Arc goes: cudarc destroys the stream
    assert rx.cudarc_strong_count() == 0
    s.close()
    with pytest.raises(ValueError, match="closed"):
        rx.handle_of(s)


def test_a_cudarc_stream_released_by_deallocation(rx):
    cp = peer("cupy")
    x = cp.zeros(N, dtype=cp.float32)
    cp.cuda.Device(0).synchronize()
    s = rx.cudarc_stream(0, x.data.ptr, N, 2.0, 0)
    s.synchronize()
    del s
    import gc

    gc.collect()
    assert rx.cudarc_strong_count() == 0
    assert bool((x == 2.0).all())
