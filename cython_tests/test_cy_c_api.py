"""The C face: c_consumer.c (no Cython) includes custream.h and imports the capsule in its
PyInit, as pybind11, nanobind or hand-written modules do. `cext` runs every test three
times: the module compiled as C, as C++ and against the limited API."""

import gc
import importlib
import sys
import weakref

import pytest

import custream


class Producer:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def test_the_capsule_is_published():
    capsule = custream._custream._C_API
    assert type(capsule).__name__ == "PyCapsule"
    assert "custream._custream._C_API" in repr(capsule)


def test_import_checks_the_version_and_sizes(cext):
    abi = cext.abi()
    assert abi["compiled"] == abi["table_abi"] == custream.ABI_VERSION
    assert abi["StreamType"] is custream.Stream
    assert abi["stream_size"] == custream.Stream.__basicsize__ == cext.layout()["sizeof"]
    assert abi["api_size"] == cext.layout()["sizeof_capi"]


def test_import_refuses_another_abi_version(built):
    with pytest.raises(ImportError) as info:
        importlib.import_module("c_consumer_abi99")
    message = str(info.value)
    assert "custream C API version mismatch" in message
    assert f"ABI 99 but the installed custream provides ABI {custream.ABI_VERSION}" in message
    assert "rebuild this module" in message
    assert "c_consumer_abi99" not in sys.modules


def test_import_refuses_an_older_custream_than_the_header(built):
    # Built against a custream.h whose struct has one more pointer at the end: a newer header
    # than the running custream, which lacks that field. Both releases are named.
    with pytest.raises(ImportError, match="custream C API layout mismatch") as info:
        importlib.import_module("c_consumer_bigger")
    size = custream.Stream.__basicsize__
    api_size = importlib.import_module("c_consumer").abi()["api_size"]
    v = custream.__version__
    assert (
        f"the custream.h of custream {v} (a table of {api_size} bytes and a Stream of {size + 8} bytes), "
        f"the installed custream {v} has {api_size} and {size} (older than the header); "
        f"install custream {v} or newer"
    ) in str(info.value)


def test_as_stream(cext):
    producer = Producer(0xA000)
    s = cext.as_stream(producer)
    assert type(s) is custream.Stream and s.handle == 0xA000 and s.owner is producer
    assert cext.as_stream(s) is s
    with pytest.raises(TypeError, match="as_stream.*got str"):
        cext.as_stream("nope")


def test_from_handle_keeps_the_owner(cext):
    owner = Producer(0)
    alive = weakref.ref(owner)
    s = cext.from_handle(0xB000, 1, owner)
    assert s.owner is owner and s.handle == 0xB000
    assert cext.fields(s) == {"handle": 0xB000, "flags": 0, "device": 1, "priority": 0, "closed": False}
    del owner
    gc.collect()
    assert alive() is not None
    del s
    gc.collect()
    assert alive() is None
    assert cext.from_handle(0xB000, -1, None).owner is None


def test_from_handle_validates_the_device(cext):
    with pytest.raises(ValueError, match="device -2 is not an ordinal"):
        cext.from_handle(0xB000, -2, None)


def test_from_handle_with_deleter_calls_it_once(cext):
    s = cext.from_handle_with_deleter(0xC000, -1, 7)
    assert cext.deleter_record(7) == (0, 0)
    s.close()
    assert cext.deleter_record(7) == (1, 0xC000)
    s.close()
    del s
    assert cext.deleter_record(7) == (1, 0xC000)
    s = cext.from_handle_with_deleter(0xC100, 0, 8)
    del s
    assert cext.deleter_record(8) == (1, 0xC100)


def test_check_and_checked_handle(cext):
    s = custream.Stream.from_handle(0xD000)
    assert cext.check(s) is True
    assert cext.check(Producer(1)) is False and cext.check(None) is False
    assert cext.handle_checked(s) == 0xD000
    assert cext.handle_checked(custream.Stream.from_handle(0)) == 0
    with pytest.raises(TypeError, match="Custream_HandleChecked\\(\\) expected a custream.Stream, got int"):
        cext.handle_checked(5)
    s.close()
    assert cext.fields(s)["closed"] is True
    with pytest.raises(ValueError, match="handle on a closed custream.Stream"):
        cext.handle_checked(s)
    with pytest.raises(ValueError, match="synchronize\\(\\) on a closed custream.Stream"):
        cext.synchronize(s)


def test_synchronize_checks_its_argument(cext):
    with pytest.raises(TypeError, match="Custream_Synchronize\\(\\) expected a custream.Stream, got Producer"):
        cext.synchronize(Producer(0))


@pytest.mark.skipif(custream.is_available(), reason="checks the no-driver error; this machine has a driver")
def test_synchronize_without_a_driver_raises_cuda_unavailable(cext):
    with pytest.raises(custream.CudaUnavailableError):
        cext.synchronize(custream.Stream.from_handle(0))


def test_green_context_and_sm_count_check_their_argument(cext):
    with pytest.raises(TypeError, match="Custream_SmCount\\(\\) expected a custream.Stream, got Producer"):
        cext.slice(Producer(0))
    closed = custream.Stream.from_handle(0x1000)
    closed.close()
    with pytest.raises(ValueError, match="sm_count on a closed custream.Stream"):
        cext.slice(closed)


@pytest.mark.skipif(custream.is_available(), reason="checks the no-driver error; this machine has a driver")
def test_sm_count_without_a_driver_raises_cuda_unavailable(cext):
    with pytest.raises(custream.CudaUnavailableError):
        cext.slice(custream.Stream.from_handle(0x1000))


def test_stream_id_and_device_check_their_argument(cext):
    with pytest.raises(TypeError, match="Custream_StreamDevice\\(\\) expected a custream.Stream, got Producer"):
        cext.id_and_device(Producer(0))
    closed = custream.Stream.from_handle(0x1000, device=3)
    closed.close()
    with pytest.raises(ValueError, match="id on a closed custream.Stream"):
        cext.id_and_device(closed)  # the device was given: it still answers; the id refuses


@pytest.mark.skipif(custream.is_available(), reason="checks the no-driver error; this machine has a driver")
def test_stream_id_without_a_driver_raises_cuda_unavailable(cext):
    with pytest.raises(custream.CudaUnavailableError):
        cext.id_and_device(custream.Stream.from_handle(0x1000, device=3))
    with pytest.raises(custream.CudaUnavailableError):
        cext.id_and_device(custream.Stream.from_handle(0x1000))
