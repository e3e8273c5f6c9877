"""On a GPU: a Cython module that got its stream by cimport launches real work on s.handle
through the CUDA driver and checks the memory it wrote (gpu_consumer.pyx, built with
cuda.h and libcuda only when these run)."""

from contextlib import closing
import pytest

import custream

pytestmark = pytest.mark.gpu

N = 1 << 20


def test_memset_on_an_owned_stream(gpu_cy):
    with closing(custream.Stream()) as s:
        assert gpu_cy.memset_and_read(s, s.device, 0xAB, N) == N
        assert s.query() is True


def test_memset_on_a_stream_wrapped_from_a_protocol_object(gpu_cy):
    owned = custream.Stream(non_blocking=False)

    class Producer:
        def __cuda_stream__(self):
            return owned.__cuda_stream__()

    wrapped = custream.as_stream(Producer())
    assert wrapped.handle == owned.handle and not wrapped.owned
    assert gpu_cy.memset_and_read(wrapped, owned.device, 0x5C, N) == N
    wrapped.close()
    owned.close()


def test_a_stream_handed_over_with_a_deleter_is_destroyed_once(gpu_cy):
    before, _ = gpu_cy.destroy_record()
    s = gpu_cy.make_owned_elsewhere(0)
    assert not s.owned and s.device == 0 and s.non_blocking is True
    assert gpu_cy.memset_and_read(s, 0, 0x3D, N) == N
    assert gpu_cy.destroy_record()[0] == before
    s.close()
    assert gpu_cy.destroy_record() == (before + 1, 0)  # cuStreamDestroy returned CUDA_SUCCESS
    del s
    assert gpu_cy.destroy_record() == (before + 1, 0)


def test_the_device_field_is_filled_in_once_resolved(gpu_cy):
    with closing(custream.Stream()) as owned:
        assert gpu_cy.device_field(owned) == owned.device
        borrowed = custream.Stream.from_handle(owned.handle)
        assert gpu_cy.device_field(borrowed) == -1
        assert borrowed.device == owned.device  # one driver call, then kept in the struct
        assert gpu_cy.device_field(borrowed) == owned.device
        borrowed.close()
