"""Python objects the C++ tests hand to custream: producers of the CUDA Stream Protocol (what
CuPy, PyTorch, cuda.core, numba-cuda and rmm streams all are to a consumer), and bad ones;
and the checks several test files share."""


class Producer:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


class AttributeProducer:
    """A non-callable __cuda_stream__, as early producers had: accepted with a warning."""

    def __init__(self, handle):
        self.__cuda_stream__ = (0, handle)


class Raising:
    def __cuda_stream__(self):
        raise KeyError("from the producer")


class BadVersion:
    def __cuda_stream__(self):
        return (1, 0x10)


def assert_returns_itself(f, obj):
    """f(obj) is obj, and obj's reference count is what it was."""
    import sys

    refs = sys.getrefcount(obj)
    assert f(obj) is obj
    assert sys.getrefcount(obj) == refs


def check_cuda_stream_made(make):
    """make(0) moves a new cuda::stream into Python. Without a driver CCCL's constructor throws
    cuda_error, which must arrive as a Python RuntimeError, never as a C++ exception."""
    import pytest

    import custream

    if not custream.is_available():
        with pytest.raises(RuntimeError, match="libcuda"):
            make(0)
        return
    s = make(0)
    assert type(s) is custream.Stream and s.device == 0 and not s.owned
    s.synchronize()
    s.close()
