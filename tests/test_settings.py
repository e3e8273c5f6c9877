"""A stream's settings: ``sync_policy``, the L2 access-policy window, ``mem_sync_domain`` and
``copy_settings_from``, and the policy custream's own waits follow, without a GPU.

In this process (no driver): every bad value is refused by name before any driver call (a good
one then gets CudaUnavailableError, which shows the order), and a default stream refuses a
write. Against the stand-in driver (tests/standin/libcuda.c keeps the attributes per stream and
checks them as the driver does; capture.c keeps the policy and runs stand-in kernels): the
settings on owned, wrapped, pool and green-context streams, read back through another Stream
over the same handle; the window's size against the device's largest and a device without
one; a driver without the entry points; and how ``synchronize()`` polls under each policy
(counted cuStreamQuery calls and notifier launches). tests/gpu/test_gpu_settings.py checks the
same against the real driver, with CuPy and cuda.bindings on the same handle.
"""

import ctypes

import pytest

import custream
from custream import Stream

HAS_DRIVER = custream.is_available()
LIBCUDA = pytest.mark.standin("libcuda.c")
ADDR = 0x7F00_0000_0000


class CAI:
    """A foreign array over `ptr` speaking __cuda_array_interface__ (version 3)."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {"data": (ptr, True), "shape": (nbytes,), "typestr": "|u1",
                                         "strides": None, "version": 3}


class Producer:
    """Another library's stream: only __cuda_stream__."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def _set(attr, value):
    def call(s):
        setattr(s, attr, value)

    return call


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (_set("sync_policy", "fast"), ValueError,
         r"Stream.sync_policy must be 'auto', 'spin', 'yield' or 'blocking', got 'fast'"),
        (_set("sync_policy", 4), TypeError, r"Stream.sync_policy must be 'auto', .* got int"),
        (_set("sync_policy", None), TypeError, r"Stream.sync_policy must be .* got NoneType"),
        (lambda s: delattr(s, "sync_policy"), TypeError, "cannot delete Stream.sync_policy"),
        (_set("mem_sync_domain", "local"), ValueError,
         r"Stream.mem_sync_domain must be 'default' or 'remote', got 'local'"),
        (lambda s: delattr(s, "mem_sync_domain"), TypeError, "cannot delete Stream.mem_sync_domain"),
        (lambda s: s.set_access_policy_window(ADDR), TypeError, "missing required argument 'nbytes'"),
        (lambda s: s.set_access_policy_window(ADDR, 0), ValueError,
         r"set_access_policy_window\(\) nbytes must be a positive number of bytes, got 0"),
        (lambda s: s.set_access_policy_window(ADDR, -5), ValueError, "got -5"),
        (lambda s: s.set_access_policy_window(ADDR, 2**64), ValueError, "nbytes must be a positive number"),
        (lambda s: s.set_access_policy_window(ADDR, 4.0), TypeError,
         r"set_access_policy_window\(\) nbytes must be an int, got float"),
        (lambda s: s.set_access_policy_window(ADDR, True), TypeError, "nbytes must be an int, got bool"),
        (lambda s: s.set_access_policy_window(ADDR, 64, hit_ratio=1.5), ValueError,
         r"set_access_policy_window\(\) hit_ratio must be in \[0, 1\], got 1.5"),
        (lambda s: s.set_access_policy_window(ADDR, 64, hit_ratio=-0.1), ValueError, r"in \[0, 1\], got -0.1"),
        (lambda s: s.set_access_policy_window(ADDR, 64, hit_ratio=float("nan")), ValueError, r"got nan"),
        (lambda s: s.set_access_policy_window(ADDR, 64, hit_ratio="1"), TypeError,
         "hit_ratio must be a number in .0, 1., got str"),
        (lambda s: s.set_access_policy_window(ADDR, 64, hit_ratio=True), TypeError, "got bool"),
        (lambda s: s.set_access_policy_window(ADDR, 64, hit="keep"), ValueError,
         r"set_access_policy_window\(\) hit must be 'normal', 'streaming' or 'persisting', got 'keep'"),
        (lambda s: s.set_access_policy_window(ADDR, 64, miss=2), TypeError,
         r"set_access_policy_window\(\) miss must be 'normal', .*, got int"),
        (lambda s: s.set_access_policy_window(0, 64), ValueError,
         r"set_access_policy_window\(\) address must be a GPU address in \[1, 2\*\*64\), got 0"),
        (lambda s: s.set_access_policy_window(object(), 64), TypeError,
         r"address must be an int GPU address or an array with __cuda_array_interface__ or __dlpack__.*got object"),
        (lambda s: s.set_access_policy_window(CAI(ADDR, 0), 64), ValueError, "address is an empty array"),
        (lambda s: s.set_access_policy_window(ADDR, 64, 0.5), TypeError, "positional"),
        (lambda s: s.copy_settings_from(42), TypeError,
         r"copy_settings_from\(\) other must be a custream.Stream or an object with __cuda_stream__\(\), got int"),
    ],
)
def test_bad_values_are_refused_by_name_before_any_driver_call(call, exc, match):
    with pytest.raises(exc, match=match):
        call(Stream.from_handle(0x1234))


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: Stream(sync_policy="fastest"), ValueError,
         r"Stream\(\) sync_policy must be 'auto', 'spin', 'yield' or 'blocking', got 'fastest'"),
        (lambda: Stream(sync_policy=2), TypeError, r"Stream\(\) sync_policy must be .*, got int"),
        (lambda: custream.StreamPool(2, sync_policy="Spin"), ValueError,
         r"StreamPool\(\) sync_policy must be 'auto', .*, got 'Spin'"),
    ],
)
def test_a_bad_sync_policy_is_refused_before_a_stream_is_made(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


@pytest.mark.parametrize("name", ["DEFAULT_STREAM", "LEGACY_DEFAULT_STREAM", "PER_THREAD_DEFAULT_STREAM"])
def test_a_default_stream_refuses_every_write(name):
    s = getattr(custream, name)
    what = f"cannot be set on custream.{name}: a default stream is shared by every library"
    with pytest.raises(ValueError, match="Stream.sync_policy " + what):
        s.sync_policy = "spin"
    with pytest.raises(ValueError, match="Stream.mem_sync_domain " + what):
        s.mem_sync_domain = "remote"
    with pytest.raises(ValueError, match=r"set_access_policy_window\(\) " + what):
        s.set_access_policy_window(ADDR, 64)
    with pytest.raises(ValueError, match=r"clear_access_policy_window\(\) " + what):
        s.clear_access_policy_window()
    with pytest.raises(ValueError, match=r"copy_settings_from\(\) " + what):
        s.copy_settings_from(Stream.from_handle(0x1234))


@pytest.mark.skipif(HAS_DRIVER, reason="the no-driver path")
def test_good_values_reach_the_driver():
    s = Stream.from_handle(0x1234)
    for call in (
        lambda: setattr(s, "sync_policy", "blocking"),
        lambda: s.sync_policy,
        lambda: s.set_access_policy_window(CAI(ADDR, 256), 256, hit_ratio=0, hit="normal", miss="normal"),
        lambda: s.access_policy_window,
        lambda: s.copy_settings_from(Producer(0x5678)),
        lambda: Stream(sync_policy="spin"),
    ):
        with pytest.raises(custream.CudaUnavailableError):
            call()


def test_a_closed_stream_refuses_by_name():
    s = Stream.from_handle(0x1234)
    s.close()
    for call, what in (
        (lambda: s.sync_policy, "Stream.sync_policy"),
        (lambda: setattr(s, "sync_policy", "spin"), "Stream.sync_policy"),
        (lambda: s.access_policy_window, "Stream.access_policy_window"),
        (lambda: s.clear_access_policy_window(), r"clear_access_policy_window\(\)"),
        (lambda: s.mem_sync_domain, "Stream.mem_sync_domain"),
        (lambda: s.copy_settings_from(Stream.from_handle(0x5678)), r"copy_settings_from\(\)"),
    ):
        with pytest.raises(ValueError, match=what + ".*closed"):
            call()


# ---- against the stand-in driver -------------------------------------------------------------


@LIBCUDA
def test_sync_policy_travels_with_the_handle(driver):
    s = Stream()
    twin = Stream.from_handle(s.handle)  # another library's view of the same handle
    assert s.sync_policy == twin.sync_policy == "auto"
    for name in ("spin", "yield", "blocking", "auto", "blocking"):
        s.sync_policy = name
        assert twin.sync_policy == name, "kept by the driver on the stream, not by the object"
    twin.sync_policy = "spin"
    assert s.sync_policy == "spin"
    assert Stream(sync_policy="yield").sync_policy == "yield"
    assert Stream(sync_policy=None).sync_policy == "auto"


@LIBCUDA
def test_a_name_made_at_run_time_sets_as_a_literal_does_and_reads_give_one_object(driver):
    """The names a read returns are made once (interned); a setter finds a literal by identity
    and any other str equal to a name by its text."""
    s = Stream()
    for name in ("spin", "blocking"):
        built = "".join(list(name))  # equal, not the interned object
        assert built is not name
        s.sync_policy = built
        assert s.sync_policy == name and s.sync_policy is s.sync_policy
    s.mem_sync_domain = "".join(list("remote"))
    assert s.mem_sync_domain is s.mem_sync_domain == "remote"
    with pytest.raises(ValueError, match="must be 'auto', 'spin', 'yield' or 'blocking', got 'Spin'"):
        s.sync_policy = "Spin"


@LIBCUDA
def test_a_pools_streams_are_made_with_its_policy(driver):
    pool = custream.StreamPool(3, sync_policy="blocking")
    assert {pool[i].sync_policy for i in range(len(pool))} == {"blocking"}
    assert pool.get().sync_policy == "blocking"
    with pool.lease() as s:
        s.sync_policy = "spin"  # a pool's stream is a plain Stream: its settings are the user's
        assert Stream.from_handle(s.handle).sync_policy == "spin"
    pool.close()
    assert custream.StreamPool(1).get().sync_policy == "auto"


@LIBCUDA
def test_green_context_streams_take_settings(driver):
    gc = custream.GreenContext(16)
    s = Stream(green_context=gc, sync_policy="spin")
    assert s.sync_policy == "spin"
    t = gc.create_stream()
    t.mem_sync_domain = "remote"
    t.copy_settings_from(s)
    assert (t.sync_policy, t.mem_sync_domain) == ("spin", "default"), "every setting copied"
    pool = custream.StreamPool(2, green_context=gc, sync_policy="yield")
    assert pool.get().sync_policy == "yield"
    pool.close(), s.close(), t.close(), gc.close()


@LIBCUDA
def test_the_access_policy_window_round_trips(driver):
    s = Stream()
    assert s.access_policy_window is None
    s.set_access_policy_window(ADDR, 1 << 20)
    w = s.access_policy_window
    assert isinstance(w, custream.AccessPolicyWindow) and isinstance(w, tuple)
    assert w == (ADDR, 1 << 20, 1.0, "persisting", "streaming")
    assert (w.address, w.nbytes, w.hit_ratio, w.hit, w.miss) == tuple(w)
    s.set_access_policy_window(CAI(ADDR + 256, 4096), 4096, hit_ratio=0.6, hit="normal", miss="persisting")
    assert Stream.from_handle(s.handle).access_policy_window == custream.AccessPolicyWindow(
        ADDR + 256, 4096, 0.6, "normal", "persisting"), "0.6 read back as 0.6, not the float32's digits"
    s.clear_access_policy_window()
    assert s.access_policy_window is None
    s.clear_access_policy_window()  # clearing nothing is fine


@LIBCUDA
def test_the_window_is_checked_against_the_devices_largest(driver):
    s = Stream()
    most = 128 << 20  # the stand-in's CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE
    s.set_access_policy_window(ADDR, most)
    calls = driver.standin_attribute_calls()
    with pytest.raises(ValueError, match=rf"nbytes {most + 1} is more than device 0's largest window, {most} bytes "
                                         r"\(CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE\)"):
        s.set_access_policy_window(ADDR, most + 1)
    assert driver.standin_attribute_calls() == calls, "refused before cuStreamSetAttribute"
    assert s.access_policy_window.nbytes == most
    driver.standin_max_window(0)  # a device before compute capability 8.0
    with pytest.raises(custream.CudaError, match="device 0 has no L2 access-policy window") as e:
        s.set_access_policy_window(ADDR, 64)
    assert e.value.name == "CUDA_ERROR_NOT_SUPPORTED"
    s.clear_access_policy_window()  # clearing needs no window support
    assert s.access_policy_window is None


@LIBCUDA
def test_mem_sync_domain_round_trips(driver):
    s = Stream()
    assert s.mem_sync_domain == "default"
    s.mem_sync_domain = "remote"
    assert Stream.from_handle(s.handle).mem_sync_domain == "remote"
    s.mem_sync_domain = "default"
    assert s.mem_sync_domain == "default"


@LIBCUDA
def test_copy_settings_from_takes_every_setting_from_any_stream(driver):
    src = Stream(sync_policy="blocking")
    src.set_access_policy_window(ADDR, 8192, hit_ratio=0.25)
    src.mem_sync_domain = "remote"
    dst = Stream()
    dst.copy_settings_from(Producer(src.handle))  # another library's stream object
    assert dst.sync_policy == "blocking" and dst.mem_sync_domain == "remote"
    assert dst.access_policy_window == (ADDR, 8192, 0.25, "persisting", "streaming")
    closed = Stream()
    closed.close()
    with pytest.raises(ValueError, match=r"copy_settings_from\(\).*closed"):
        dst.copy_settings_from(closed)


@LIBCUDA
def test_a_default_stream_reads_its_contexts_settings(driver):
    assert custream.LEGACY_DEFAULT_STREAM.sync_policy == "auto"
    assert custream.PER_THREAD_DEFAULT_STREAM.access_policy_window is None
    assert custream.DEFAULT_STREAM.mem_sync_domain == "default"
    # And as a source: the default settings copied onto a stream of one's own.
    s = Stream(sync_policy="spin")
    s.copy_settings_from(custream.LEGACY_DEFAULT_STREAM)
    assert s.sync_policy == "auto"


@pytest.mark.standin("libcuda.c", "-DSTANDIN_NO_ATTRIBUTES",
                     omit=("cuStreamSetAttribute", "cuStreamGetAttribute", "cuStreamCopyAttributes"))
def test_a_driver_without_the_entry_points_is_named(driver):
    s = Stream()
    live = driver.standin_live_streams()
    for call, what in (
        (lambda: s.sync_policy, "Stream.sync_policy"),
        (lambda: setattr(s, "mem_sync_domain", "remote"), "Stream.mem_sync_domain"),
        (lambda: s.copy_settings_from(Stream()), r"Stream.copy_settings_from\(\)"),
    ):
        with pytest.raises(custream.CudaError, match=rf"the CUDA driver \(CUDA 13.0\) has no cuStreamSetAttribute, "
                                                     rf"which {what} needs") as e:
            call()
        assert e.value.name == "CUDA_ERROR_NOT_SUPPORTED"
    with pytest.raises(custream.CudaError, match="has no cuStreamSetAttribute"):
        Stream(sync_policy="spin")
    assert driver.standin_live_streams() == live, "the stream made for it was destroyed"
    s.synchronize(timeout=1)  # a wait falls back to the default policy


@LIBCUDA
def test_a_driver_refusal_names_the_attribute(driver):
    s = Stream()
    driver.standin_sticky(700)
    with pytest.raises(custream.CudaError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        s.sync_policy = "spin"
    driver.standin_sticky(0)
    # The stand-in refuses a window of an unknown handle: the error names the call and attribute.
    with pytest.raises(custream.CudaError, match=r"cuStreamGetAttribute\(CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW\)") as e:
        Stream.from_handle(0xDEAD000).access_policy_window
    assert e.value.name == "CUDA_ERROR_INVALID_HANDLE"


# ---- custream's own waits follow the policy ----------------------------------------------------
# libcuda.c's standin_slow_synchronize makes every stream busy (cuStreamQuery answers NOT_READY);
# a notifier's host function runs at once there, so a wait that arms one ends at once, and one
# that polls polls until its deadline. The counts say which a wait did.


def _waited(driver, s, **kwargs):
    queries, host_funcs = driver.standin_queries(), driver.standin_host_funcs()
    try:
        s.synchronize(**kwargs)
        outcome = "done"
    except TimeoutError:
        outcome = "timed out"
    return outcome, driver.standin_queries() - queries, driver.standin_host_funcs() - host_funcs


@LIBCUDA
def test_a_blocking_stream_arms_a_notifier_at_once(driver):
    s = Stream(sync_policy="blocking")
    driver.standin_slow_synchronize(1)
    s.synchronize()  # the context's first notifier made, outside the count
    outcome, queries, host_funcs = _waited(driver, s)
    assert outcome == "done" and host_funcs >= 1
    assert queries <= 3, f"a blocking stream's wait polled ({queries} queries)"


@LIBCUDA
def test_an_auto_stream_polls_first(driver):
    s = Stream()
    driver.standin_slow_synchronize(1)
    s.synchronize()
    outcome, queries, host_funcs = _waited(driver, s)
    assert outcome == "done" and host_funcs >= 1
    assert queries > 50, f"the first 20 ms are polled ({queries} queries)"


@LIBCUDA
def test_a_yield_stream_polls_then_arms(driver):
    s = Stream(sync_policy="yield")
    driver.standin_slow_synchronize(1)
    s.synchronize()
    outcome, queries, host_funcs = _waited(driver, s)
    assert outcome == "done" and host_funcs >= 1 and queries > 3


@LIBCUDA
def test_a_spin_stream_polls_to_the_end_and_never_arms(driver):
    s = Stream(sync_policy="spin")
    driver.standin_slow_synchronize(1)
    outcome, queries, host_funcs = _waited(driver, s, timeout=0.2)
    assert outcome == "timed out", "the stand-in's stream never ends: the deadline ends the spin"
    assert host_funcs == 0, "no notifier armed"
    assert queries > 100, f"polled all along ({queries} queries)"


@pytest.mark.standin("capture.c")
def test_a_spin_wait_ends_with_the_work(driver, kernel):
    s = Stream(sync_policy="spin")
    assert s.sync_policy == "spin"
    kernel(s, 100)
    before = driver.fake_queries()
    s.synchronize()
    assert s.query() and driver.fake_queries() - before > 10
    t = Stream()
    assert t.sync_policy == "auto", "a stream never set answers 0 on capture.c: read as auto"
    t.sync_policy = "blocking"
    kernel(t, 50)
    t.synchronize()  # the context's first notifier made, outside the count
    kernel(t, 100)
    before = driver.fake_queries()
    t.synchronize()
    assert t.query() and driver.fake_queries() - before <= 3, "a blocking wait does not poll"
