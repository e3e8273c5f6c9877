"""Green contexts on a real device (issue 27): a stream's work runs on its green context's SMs
only, two partitions run at once, another library's green context comes in, and CuPy and
PyTorch order work on a green-context stream through the protocol.

Where a block of a kernel ran is read from the hardware: ``%smid``, the SM it is on, written
per block. The partitions are of an H200 (132 SMs) in the issue; on another GPU the same checks
run with its counts. tests/test_green.py checks the bookkeeping against the stand-in driver."""

import ctypes
import subprocess
import sys
import threading
import time
from contextlib import closing

import pytest

import custream
from custream import GreenContext, Stream
from custream_gpu_helpers import make_work, peer, try_import

pytestmark = pytest.mark.gpu

cupy = peer("cupy")

SMID = r"""
extern "C" __global__ void record_smid(int *smids, long long cycles) {
    if (threadIdx.x == 0) {
        unsigned int id;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
        smids[blockIdx.x] = (int)id;
        long long start = clock64();
        while (clock64() - start < cycles) {
        }
    }
    __syncthreads();
}

extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
"""


@pytest.fixture(scope="module")
def kernels():
    if custream.driver_version() < 12040:
        pytest.skip(f"green contexts need a 12.4 driver; this one is {custream.driver_version()}")
    cupy.cuda.Device(0).use()
    module = cupy.RawModule(code=SMID)
    return module.get_function("record_smid"), module.get_function("spin")


@pytest.fixture(scope="module")
def device_sms():
    with closing(Stream()) as s:
        n = s.sm_count
    name = custream.device_info(0)[0]
    if "H200" in name:
        assert n == 132, f"an H200 with {n} SMs"
    if n < 32:
        pytest.skip(f"{name} has {n} SMs: too few to split in two")
    return n


def on(stream):
    """CuPy's view of any protocol stream (custream's)."""
    return cupy.cuda.Stream.from_external(stream)


def smids_of(kernels, stream, blocks, cycles=1_000_000):
    """The SM each of `blocks` blocks of record_smid ran on, launched by CuPy on `stream`."""
    record, _ = kernels
    out = cupy.full(blocks, -1, dtype=cupy.int32)
    with on(stream):
        record((blocks,), (128,), (out, cupy.int64(cycles)))
    custream.as_stream(stream).synchronize()
    ids = out.get().tolist()
    assert min(ids) >= 0, "a block did not run"
    return set(ids)


def test_split_16_116_and_each_streams_blocks_stay_on_its_sms(kernels, device_sms):
    small, rest = GreenContext.split(16)
    with small, rest:
        assert small.sm_count == 16, "16 is a whole number of Hopper's groups of 8: granted as asked"
        assert rest.sm_count == device_sms - 16
        a, b = small.create_stream(), Stream(green_context=rest)
        assert (a.sm_count, b.sm_count) == (16, device_sms - 16)
        assert a.green_context is small and b.green_context is rest
        blocks = 4 * device_sms  # far more blocks than the slice's SMs: spread over all it may use
        on_a, on_b = smids_of(kernels, a, blocks), smids_of(kernels, b, blocks)
        assert len(on_a) <= a.sm_count, f"{len(on_a)} SMs ran blocks of a {a.sm_count}-SM stream"
        assert len(on_b) <= b.sm_count, f"{len(on_b)} SMs ran blocks of a {b.sm_count}-SM stream"
        assert len(on_a) >= a.sm_count // 2 and len(on_b) >= b.sm_count // 2, "the blocks did not spread"
        assert not on_a & on_b, f"the partitions share SMs {sorted(on_a & on_b)}"
        with closing(Stream()) as whole:
            assert whole.sm_count == device_sms and whole.green_context is None
            assert len(smids_of(kernels, whole, blocks)) > b.sm_count, "the whole device ran on a slice"
        a.close(), b.close()


def test_a_single_green_context_rounds_and_confines(kernels, device_sms):
    for asked in (1, 8, 20, 64):
        with GreenContext(asked) as gc:
            # Rounded up to the driver's granularity (8 SMs on Hopper), never down.
            assert asked <= gc.sm_count and (gc.sm_count < asked + 16 or gc.sm_count == device_sms), (asked, gc.sm_count)
            with closing(gc.create_stream()) as s:
                used = smids_of(kernels, s, 4 * device_sms)
                assert len(used) <= gc.sm_count, (asked, gc.sm_count, len(used))


def test_two_partitions_run_at_once(kernels, device_sms):
    """Spin kernels that fill each partition: together they take about as long as the longer
    one alone, well below the sum (on one set of SMs they would take the sum)."""
    _, spin = kernels
    small, rest = GreenContext.split(device_sms // 2)
    with small, rest:
        a, b = small.create_stream(), rest.create_stream()
        # Two resident blocks of 1024 threads an SM, two waves, ~50 ms a block at ~2 GHz.
        cycles = cupy.int64(100_000_000)

        def fill(stream, gc):
            with on(stream):
                spin((4 * gc.sm_count,), (1024,), (cycles,))

        def timed(*pairs):
            start = time.perf_counter()
            for stream, gc in pairs:
                fill(stream, gc)
            for stream, _ in pairs:
                stream.synchronize()
            return time.perf_counter() - start

        timed((a, small), (b, rest))  # warm up
        alone_a, alone_b = timed((a, small)), timed((b, rest))
        together = timed((a, small), (b, rest))
        assert together < 0.75 * (alone_a + alone_b), (alone_a, alone_b, together)
        a.close(), b.close()


def test_the_granted_count_is_the_drivers_own(kernels, device_sms):
    """sm_count is read back from the green context's resource: cuda.bindings agrees."""
    drv = try_import("cuda.bindings.driver")
    if drv is None:
        pytest.skip("cuda.bindings is not installed")
    with GreenContext(24) as gc:
        err, res = drv.cuGreenCtxGetDevResource(gc.handle, drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM)
        assert err == drv.CUresult.CUDA_SUCCESS, err
        assert res.sm.smCount == gc.sm_count


# ---- other libraries' green contexts --------------------------------------------------------------

def libcuda():
    return ctypes.CDLL("libcuda.so.1")


class DevResource(ctypes.Structure):
    """CUdevResource: 144 bytes, the SM count at offset 96 (13.1's nextResource last)."""

    _fields_ = [("type", ctypes.c_uint), ("internal", ctypes.c_ubyte * 92), ("sm_count", ctypes.c_uint),
                ("rest", ctypes.c_ubyte * 36), ("next", ctypes.c_void_p)]


assert ctypes.sizeof(DevResource) == 144


def foreign_green_context(sms):
    """A green context of at least `sms` SMs made straight through the driver, as another
    library (a C++ one, say) makes it: (handle, the converted context)."""
    cu = libcuda()
    dev = ctypes.c_int()
    all_sms, group, rest = DevResource(), DevResource(), DevResource()
    n = ctypes.c_uint(1)
    desc, green, ctx = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    for call in (lambda: cu.cuInit(0), lambda: cu.cuDeviceGet(ctypes.byref(dev), 0),
                 lambda: cu.cuDeviceGetDevResource(dev, ctypes.byref(all_sms), 1),
                 lambda: cu.cuDevSmResourceSplitByCount(ctypes.byref(group), ctypes.byref(n),
                                                             ctypes.byref(all_sms), ctypes.byref(rest), 0, sms),
                 lambda: cu.cuDevResourceGenerateDesc(ctypes.byref(desc), ctypes.byref(group), 1),
                 lambda: cu.cuGreenCtxCreate(ctypes.byref(green), desc, dev, 1),
                 lambda: cu.cuCtxFromGreenCtx(ctypes.byref(ctx), green)):
        assert call() == 0
    return green.value, ctx.value


def test_a_foreign_green_context_and_cupys_stream_in_it(kernels, device_sms):
    green, ctx = foreign_green_context(24)
    cu = libcuda()
    try:
        gc = GreenContext.from_handle(green, owner=None)
        assert not gc.owned and gc.handle == green and gc.sm_count >= 24 and gc.device == 0
        with closing(gc.create_stream()) as s:
            assert len(smids_of(kernels, s, 4 * device_sms)) <= gc.sm_count
        # A stream the runtime makes while the converted context is current is in that green
        # context too: custream asks the driver, and finds the object adopted above.
        popped = ctypes.c_void_p()
        assert cu.cuCtxPushCurrent_v2(ctypes.c_void_p(ctx)) == 0
        try:
            theirs = cupy.cuda.Stream(non_blocking=True)
        finally:
            cu.cuCtxPopCurrent_v2(ctypes.byref(popped))
        wrapped = custream.as_stream(theirs)
        assert wrapped.green_context is gc and wrapped.sm_count == gc.sm_count
        assert len(smids_of(kernels, theirs, 4 * device_sms)) <= gc.sm_count
        wrapped.close()
        del theirs
        gc.close()
    finally:
        cu.cuGreenCtxDestroy(ctypes.c_void_p(green))


def test_a_cuda_core_green_context_is_adopted_and_used(kernels, device_sms):
    core = try_import("cuda.core")
    if core is None:
        pytest.skip("cuda.core is not installed")
    if not all(hasattr(core, n) for n in ("SMResourceOptions", "ContextOptions")):
        pytest.skip(f"cuda.core {getattr(core, '__version__', '?')} has no green contexts (SMResourceOptions)")
    dev = core.Device(0)
    dev.set_current()
    groups, _rest = dev.resources.sm.split(core.SMResourceOptions(count=16))
    ctx = dev.create_context(core.ContextOptions(resources=[groups[0]]))
    assert ctx.is_green
    gc = GreenContext.from_handle(ctx)  # a cuda.core Context: its own owner
    assert gc.owner is ctx and gc.sm_count == groups[0].sm_count and not gc.owned
    again = GreenContext.from_handle(ctx.handle, owner=ctx)  # its converted CUcontext
    assert again.handle == gc.handle
    again.close()
    # A custream stream in it, and cuda.core's own stream in it seen through the protocol.
    with closing(gc.create_stream()) as ours:
        assert len(smids_of(kernels, ours, 4 * device_sms)) <= gc.sm_count
    cs = ctx.create_stream()
    wrapped = custream.as_stream(cs)
    assert wrapped.green_context is gc and wrapped.sm_count == gc.sm_count
    assert len(smids_of(kernels, cs, 4 * device_sms)) <= gc.sm_count
    wrapped.close()
    cs.close()
    gc.close()
    assert gc.owner is None


# ---- CuPy and torch order work on a green-context stream through the protocol -----------------------


@pytest.mark.parametrize("peer_name", ["cupy", "torch"])
def test_peers_order_work_on_a_green_context_stream(peer_name):
    if custream.driver_version() < 12040:
        pytest.skip("green contexts need a 12.4 driver")
    work = make_work(peer_name)
    small, rest = GreenContext.split(16)
    with small, rest:
        a, b = small.create_stream(), rest.create_stream()
        work.spin_then_mark(a)  # about 100 ms, then out[0] = 1
        assert a.query() is False, "the handle is not the stream the kernel went to"
        b.wait(a)  # an event in a's green context, waited on in b's
        work.copy_mark(b)  # out[1] = out[0], after the spin
        b.synchronize()
        assert work.result() == (1, 1)
        # And onto a plain stream, through the default stream's world.
        with closing(Stream()) as plain:
            work.spin_then_mark(a)
            plain.wait(a.record())
            work.copy_mark(plain)
            plain.synchronize()
            assert work.result() == (1, 1)
        a.close(), b.close()


# ---- lifecycle on the device ---------------------------------------------------------------------


def test_closing_the_green_context_first_leaves_its_streams_working(kernels, device_sms):
    gc = GreenContext(16)
    streams = [gc.create_stream() for _ in range(3)]
    gc.close()
    for s in streams:
        assert len(smids_of(kernels, s, 2 * device_sms)) <= 16
        s.close()  # the last one destroys the driver's green context
    with pytest.raises(ValueError, match="create_stream\\(\\) on a closed custream.GreenContext"):
        gc.create_stream()


def test_many_threads_make_streams_in_one_green_context(kernels):
    errors = []
    with GreenContext(16) as gc:

        def work():
            try:
                for _ in range(50):
                    with closing(gc.create_stream()) as s:
                        s.synchronize()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=work) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[:3]


def test_exit_with_live_green_contexts_and_streams():
    code = (
        "import custream\n"
        "small, rest = custream.GreenContext.split(16)\n"
        "S = [small.create_stream(), custream.Stream(green_context=rest)]\n"
        "P = custream.StreamPool(4, green_context=rest)\n"
        "for s in S: s.synchronize()\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-X", "dev", "-c", code], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ok\n", "")
