"""Stream memory operations, Stream.write_value and Stream.wait_value, without a GPU.

In this process: every bad argument is refused by name before any driver call (on a machine
without a driver, a good call gets CudaUnavailableError instead, which shows the order).

Against the stand-in driver (tests/standin/capture.c, whose "GPU" is a thread that runs the
operations on host memory in stream order): the conditions, both widths, the address read from
__cuda_array_interface__ and from a DLPack capsule, what the driver says of an address
(unknown, unmapped host memory, managed memory), the device's support, the C API's entries,
and capture into a graph (the tests marked ``standin``, each in a pytest process of its own,
tests/conftest.py). tests/gpu/test_gpu_memops.py checks the same on a real GPU.
"""

import ctypes
import types

import pytest

import custream
from _threads import wait_until
from custream import Stream

HAS_DRIVER = custream.is_available()


class CAI:
    """A foreign array over `ptr` speaking __cuda_array_interface__ (version 3)."""

    def __init__(self, ptr, shape=(4,), typestr="<u4", readonly=False, strides=None):
        self.__cuda_array_interface__ = {
            "data": (ptr, readonly),
            "shape": shape,
            "typestr": typestr,
            "strides": strides,
            "version": 3,
        }


class DLDevice:
    """A DLPack producer that says where it lives and has nothing to give."""

    def __init__(self, device_type):
        self.device_type = device_type

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("not reached: the device type is refused first")


ALIGNED = 0x7F00_0000_0000


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda s: s.write_value(ALIGNED, 1, width=16), ValueError, r"write_value\(\) width must be 32 or 64, got 16"),
        (lambda s: s.wait_value(ALIGNED, 1, width="32"), TypeError, r"wait_value\(\) width must be 32 or 64, got str"),
        (lambda s: s.write_value(ALIGNED, 1, width=True), TypeError, "width must be 32 or 64, got bool"),
        (lambda s: s.wait_value(ALIGNED, 1, op="gt"), ValueError, r"op must be 'geq', 'eq', 'and' or 'nor', got 'gt'"),
        (lambda s: s.wait_value(ALIGNED, 1, op=1), TypeError, r"op must be a str .*, got int"),
        (lambda s: s.wait_value(ALIGNED, 1, flush=1), TypeError, "flush must be True or False, got int"),
        (lambda s: s.write_value(ALIGNED, 1, flush="yes"), TypeError, "flush must be True or False, got str"),
        (lambda s: s.write_value(ALIGNED, -1), ValueError, r"value -1 is out of range for width=32: it must be in \[0, 2\*\*32\)"),
        (lambda s: s.write_value(ALIGNED, 2**32), ValueError, "value 4294967296 is out of range for width=32"),
        (lambda s: s.wait_value(ALIGNED, 2**64, width=64), ValueError, r"out of range for width=64: it must be in \[0, 2\*\*64\)"),
        (lambda s: s.write_value(ALIGNED, 1.0), TypeError, r"write_value\(\) value must be an int, got float"),
        (lambda s: s.write_value(ALIGNED + 2, 1), ValueError, "is not aligned to 4 bytes, as a 32-bit"),
        (lambda s: s.wait_value(ALIGNED + 4, 1, width=64), ValueError, "is not aligned to 8 bytes, as a 64-bit"),
        (lambda s: s.write_value(0, 1), ValueError, r"address must be a GPU address in \[1, 2\*\*64\), got 0"),
        (lambda s: s.write_value(-8, 1), ValueError, "address must be a GPU address in .*, got -8"),
        (lambda s: s.write_value(2**64, 1), ValueError, "address must be a GPU address"),
        (lambda s: s.write_value(True, 1), TypeError, "address must be an int GPU address or an array .*, got bool"),
        (lambda s: s.wait_value(object(), 1), TypeError, r"wait_value\(\) address must be .*__cuda_array_interface__ or __dlpack__.*, got object"),
        (lambda s: s.write_value(CAI(ALIGNED, readonly=True), 1), ValueError, "address is a read-only CAI array"),
        (lambda s: s.wait_value(CAI(ALIGNED, shape=(0,)), 1), ValueError, "address is an empty array"),
        (lambda s: s.wait_value(CAI(ALIGNED, shape=(1,)), 1, width=64), ValueError, "array of 4 bytes: a 64-bit value needs 8"),
        (lambda s: s.wait_value(CAI(ALIGNED, shape=(4,), typestr="|u1", strides=(2,)), 1), ValueError, r"\(not contiguous\)"),
        (lambda s: s.write_value(CAI(ALIGNED + 1, typestr="|u1"), 1), ValueError, "not aligned to 4 bytes"),
        (lambda s: s.write_value(CAI(ALIGNED, typestr=5), 1), TypeError, "'typestr' is not a str"),
        (lambda s: s.write_value(DLDevice(13), 1), ValueError, r"managed memory \(cuMemAllocManaged\)"),
        (lambda s: s.write_value(DLDevice(10), 1), ValueError, "DLPack device type is 10"),
        (lambda s: s.write_value(ALIGNED), TypeError, "missing required argument 'value'"),
        (lambda s: s.write_value(ALIGNED, 1, 32), TypeError, r"write_value\(\) takes 2 positional arguments but 3 were given"),
        (lambda s: s.wait_value(ALIGNED, 1, mode="eq"), TypeError, "unexpected keyword argument 'mode'"),
    ],
)
def test_bad_arguments_are_refused_by_name_before_the_driver(call, exc, match):
    s = Stream.from_handle(0x1234)
    with pytest.raises(exc, match=match):
        call(s)


def test_a_closed_stream_refuses_before_the_driver():
    s = Stream.from_handle(0x1234)
    s.close()
    for call in (lambda: s.write_value(ALIGNED, 1), lambda: s.wait_value(ALIGNED, 1)):
        with pytest.raises(ValueError, match=r"_value\(\) on a closed custream.Stream"):
            call()


@pytest.mark.skipif(HAS_DRIVER, reason="the no-driver path")
def test_good_arguments_reach_the_driver():
    s = Stream.from_handle(0x1234)
    for call in (
        lambda: s.write_value(ALIGNED, 2**32 - 1),
        lambda: s.write_value(CAI(ALIGNED), 1, width=32),
        lambda: s.wait_value(ALIGNED, 2**64 - 1, width=64, op="nor", flush=True),
    ):
        with pytest.raises(custream.CudaUnavailableError):
            call()


# ---- against the stand-in driver -------------------------------------------------------------

CAPTURE = pytest.mark.standin("capture.c")


@pytest.fixture
def fake(driver):
    """capture.c, typed, and 64 bytes of its "GPU" memory: ``mem`` (the address), ``u32`` and
    ``u64`` (views of it)."""
    for alloc in (driver.fake_mem_alloc, driver.fake_managed_alloc):
        alloc.restype, alloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    mem = driver.fake_mem_alloc(64)
    return types.SimpleNamespace(
        lib=driver, mem=mem, u32=(ctypes.c_uint32 * 16).from_address(mem), u64=(ctypes.c_uint64 * 8).from_address(mem)
    )


def waits_on_its_value(fake, s):
    """`s`'s wait_value came due and waits (the stand-in's worker spins on it): a later write
    stays undone, and the stream is busy."""
    wait_until(lambda: fake.lib.fake_value_waits() == 1, "the stream waits on its value")
    return not s.query()


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]


class Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


def capsule(address, name):
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(address, name, None)


class Torchish:
    """A DLPack producer, as torch and CuPy are: a legacy "dltensor" capsule of 2 int64s."""

    calls = []

    def __init__(self, ptr, offset=0, device_type=2):
        self.shape = (ctypes.c_int64 * 1)(2)
        self.device_type = device_type
        self.t = Managed(DLTensor(ptr, device_type, 0, 1, 1, 64, 1, self.shape, None, offset))

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None):
        self.calls.append(stream)
        return capsule(ctypes.addressof(self.t), b"dltensor")


@CAPTURE
def test_the_conditions_and_widths_do_what_cuda_says(fake):
    mem, u32, u64 = fake.mem, fake.u32, fake.u64
    s, t = custream.Stream(), custream.Stream()
    s.write_value(mem, 7)
    s.write_value(mem + 8, 2**40 + 5, width=64)
    s.synchronize()
    assert u32[0] == 7 and u64[1] == 2**40 + 5
    # Each condition: the stream waits (a later write stays undone) until the host makes it true.
    for op, value, before, after in [
        ("geq", 10, 9, 10),              # cyclic: 2**32 - 1 is "before" 0 ...
        ("geq", 0, 2**32 - 1, 1),        # ... and 1 is after it
        ("eq", 5, 4, 5),
        ("and", 0b100, 0b011, 0b110),
        ("nor", 0b1, 2**32 - 1, 0b10),   # ~(word | 1) != 0 once a bit other than 1 is clear
    ]:
        u32[0], u32[1] = before, 0
        t.wait_value(mem, value, op=op)
        t.write_value(mem + 4, 1)
        assert waits_on_its_value(fake, t) and u32[1] == 0, op
        u32[0] = after
        t.synchronize()
        assert u32[1] == 1, op
    u64[1] = 2**63
    t.wait_value(mem + 8, 2**63 + 1, width=64)   # geq, 64-bit
    t.write_value(mem + 4, 2)
    assert waits_on_its_value(fake, t)
    u64[1] = 2**63 + 1
    t.synchronize()
    assert u32[1] == 2


@CAPTURE
def test_the_address_comes_from_an_array_or_a_dlpack_capsule(fake):
    s = custream.Stream()
    s.write_value(CAI(fake.mem + 16), 11)
    s.write_value(Torchish(fake.mem, 24), 12, width=64)
    s.synchronize()
    assert fake.u32[4] == 11 and fake.u64[3] == 12
    assert Torchish.calls == [-1], "asked for no synchronization"


@CAPTURE
def test_memory_the_gpu_cannot_reach_is_refused_before_anything_is_queued(fake):
    lib, mem = fake.lib, fake.mem
    s = custream.Stream()

    def refused(call, exc, match):
        before = lib.fake_memops()
        with pytest.raises(exc) as e:
            call()
        assert match in str(e.value), e.value
        assert lib.fake_memops() == before, "nothing queued"
        return e.value

    plain = (ctypes.c_uint32 * 1024)()
    refused(lambda: s.write_value(ctypes.addressof(plain), 1), ValueError, "is not GPU-accessible: CUDA does not know it")
    pinned = (ctypes.c_uint32 * 1024)()
    lib.cuMemHostRegister_v2(ctypes.c_void_p(ctypes.addressof(pinned)), ctypes.c_size_t(4096), 0)
    refused(lambda: s.wait_value(ctypes.addressof(pinned), 1), ValueError, "page-locked host memory not mapped for the GPU")
    refused(lambda: s.write_value(Torchish(ctypes.addressof(plain), device_type=1), 1), ValueError,
            "is not GPU-accessible: CUDA does not know it")
    managed = lib.fake_managed_alloc(64)
    refused(lambda: s.write_value(managed, 1), ValueError, "managed memory (cuMemAllocManaged)")
    for call, name in [(lambda: s.wait_value(mem, 1, flush=True), "wait_value"),
                       (lambda: s.write_value(mem, 1, flush=True), "write_value")]:
        e = refused(call, custream.CudaError, f"{name}() flush=True is not supported on device 0 "
                                              "(CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES is 0)")
        assert e.name == "CUDA_ERROR_NOT_SUPPORTED", e.name
    # Host memory registered and mapped is the GPU's at its device address.
    mapped = (ctypes.c_uint32 * 1024)()
    lib.cuMemHostRegister_v2(ctypes.c_void_p(ctypes.addressof(mapped)), ctypes.c_size_t(4096), 2)
    s.write_value(ctypes.addressof(mapped) + 8, 5)
    s.write_value(Torchish(ctypes.addressof(mapped) + 16, device_type=1), 6)   # a pinned CPU tensor, as torch's
    s.synchronize()
    assert mapped[2] == 5 and mapped[4] == 6


@pytest.mark.standin("capture.c", env={"FAKE_CAN_FLUSH": "1"})
def test_a_flushing_write_flushes_first_in_one_batch(fake):
    """write_value(flush=True) where the device can flush: one batch, the flush then the write."""
    s = custream.Stream()
    mapped = (ctypes.c_uint64 * 512)()
    fake.lib.cuMemHostRegister_v2(ctypes.c_void_p(ctypes.addressof(mapped)), ctypes.c_size_t(4096), 2)
    s.write_value(ctypes.addressof(mapped), 7, flush=True)
    s.write_value(ctypes.addressof(mapped) + 8, 2**40, width=64, flush=True)
    s.write_value(ctypes.addressof(mapped) + 16, 9)
    s.synchronize()
    assert fake.lib.fake_flushes() == 2, fake.lib.fake_flushes()
    assert mapped[0] & 0xFFFFFFFF == 7 and mapped[1] == 2**40 and mapped[2] & 0xFFFFFFFF == 9


@pytest.mark.standin("capture.c", env={"FAKE_NO_64BIT": "1"})
def test_a_device_without_64_bit_operations_refuses_them_by_name(fake):
    s = custream.Stream()
    for call in (lambda: s.write_value(fake.mem, 1, width=64), lambda: s.wait_value(fake.mem, 1, width=64)):
        with pytest.raises(custream.CudaError) as e:
            call()
        assert e.value.name == "CUDA_ERROR_NOT_SUPPORTED", e.value
        assert ("width=64 is not supported on device 0 (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS is 0)"
                in str(e.value))
    s.write_value(fake.mem, 3)   # 32 bits still work
    s.synchronize()
    assert fake.u32[0] == 3


@CAPTURE
def test_the_c_api_entries_check_as_the_methods_do(fake):
    from _capi_ctypes import capi

    mem = fake.mem
    table = capi()
    s = custream.Stream()
    assert table.write_value(s, mem + 12, 9, 32, 0) == 0
    assert table.wait_value(s, mem + 12, 9, 32, 1, 0) == 0   # CUSTREAM_WAIT_EQ
    s.synchronize()
    assert fake.u32[3] == 9
    for call, exc, match in [
        (lambda: table.write_value(s, mem, 1, 16, 0), ValueError, "Custream_WriteValue() width must be 32 or 64, got 16"),
        (lambda: table.write_value(s, mem, 2**32, 32, 0), ValueError, "value 4294967296 is out of range for width=32"),
        (lambda: table.wait_value(s, mem + 4, 1, 64, 0, 0), ValueError, "not aligned to 8 bytes"),
        (lambda: table.wait_value(s, mem, 1, 32, 4, 0), ValueError,
         "op must be CUSTREAM_WAIT_GEQ, _EQ, _AND or _NOR (0 to 3), got 4"),
        (lambda: table.write_value(None, mem, 1, 32, 0), TypeError,
         "Custream_WriteValue() expected a custream.Stream, got NoneType"),
        (lambda: table.write_value(s, mem, 1, 32, 1), custream.CudaError,
         "write_value() flush=True is not supported on device 0"),
    ]:
        with pytest.raises(exc) as e:
            call()
        assert match in str(e.value), e.value


@CAPTURE
def test_the_operations_are_captured_into_a_graph(fake):
    mem, u32, u64 = fake.mem, fake.u32, fake.u64
    s = custream.Stream()
    for mode in ("thread_local", "global"):
        u32[0] = u32[1] = u64[1] = 0
        s.begin_capture(mode)
        s.wait_value(mem, 1, op="eq")
        s.write_value(mem + 4, 2)
        s.write_value(mem + 8, 2**33, width=64)
        g = s.end_capture()
        assert fake.lib.fake_invalidations() == 0, "no call of custream's broke the capture"
        assert u32[1] == 0 and u64[1] == 0, "captured, not run"
        g.launch(s)
        assert waits_on_its_value(fake, s), "the graph's wait holds the stream"
        u32[0] = 1
        s.synchronize()
        assert u32[1] == 2 and u64[1] == 2**33
        g.close()


@pytest.mark.standin("libcuda.c")
def test_a_thread_with_no_current_context_asks_in_the_streams(driver):
    """libcuda.c answers pointer attributes only in a context, and no context is current in
    this process: custream makes the stream device's primary context current for the call."""
    s = custream.Stream()
    before = driver.standin_pushes()
    s.write_value(0x7F00_0000_0000, 1)
    s.wait_value(0x7F00_0000_0008, 2**40, width=64, op="and")
    assert driver.standin_pushes() > before
    assert driver.standin_primary_retains() == 2, "the stream's and custream's own, nothing leaked"
