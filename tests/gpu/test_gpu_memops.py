"""Stream memory operations on a device: ordering between streams, a semaphore in CUDA IPC
memory between two processes (both ways), the conditions, pinned host memory, what the
driver refuses and what the device supports, and capture into a graph."""

import ctypes

import pytest

import custream
from _threads import wait_until
from custream_gpu_helpers import try_import

pytestmark = pytest.mark.gpu

torch = try_import("torch")


@pytest.fixture
def need_torch():
    if torch is None:
        pytest.skip("torch is not installed")
    return torch


def settle(s):
    """Wait for `s` by polling, so that a wait whose value never comes fails the test instead of
    hanging the run."""
    wait_until(s.query, "the stream is done")


def release(words, value, width=32):
    """Write `value` to every word of `words` from a stream of its own."""
    rescue = custream.Stream()
    for i in range(words.numel()):
        rescue.write_value(words.data_ptr() + i * words.element_size(), value, width=width)
    rescue.synchronize()
    rescue.close()


class DLPackOnly:
    """A tensor seen through DLPack alone (no __cuda_array_interface__)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_a_wait_holds_a_stream_until_the_word_is_written(need_torch):
    # The writer is the CPU, on mapped host memory: CUDA warns that an order between two
    # streams of one process expressed only by memory operations may deadlock (the driver may
    # queue the writer behind the wait); across processes (below) it is the semaphore's job.
    import _ipc_gpu_workers as w

    host = torch.zeros(2, dtype=torch.int64).pin_memory()
    words = torch.zeros(4, dtype=torch.int64, device="cuda:0")
    torch.cuda.synchronize()
    b = custream.Stream()
    b.wait_value(host, 1, width=64, op="eq")  # a pinned tensor through DLPack: its first element
    try:
        with torch.cuda.stream(w.torch_stream(b)):
            words[0].fill_(5)
        with pytest.raises(TimeoutError):  # b waits for the word
            b.synchronize(timeout=0.2)
        assert words.tolist()[0] == 0, "the work behind the wait ran"
        host[0] = 1
        settle(b)
    finally:
        host[0] = 1  # a failure must not leave b waiting for the rest of the run
    assert words.tolist()[0] == 5
    b.close()


def test_a_write_lands_in_stream_order_at_the_address_each_form_names(need_torch):
    import _ipc_gpu_workers as w

    words = torch.zeros(4, dtype=torch.int64, device="cuda:0")
    torch.cuda.synchronize()
    a = custream.Stream()
    with torch.cuda.stream(w.torch_stream(a)):
        torch.cuda._sleep(w.SLEEP)
        words[1].fill_(5)
    a.write_value(DLPackOnly(words), 2**40, width=64)  # through DLPack: the first element
    a.write_value(words[2:], 7)  # __cuda_array_interface__: 32 bits into a 64-bit word's low half
    a.write_value(words.data_ptr() + 24, 9, width=64)  # an int address
    assert not a.query(), "the writes wait for the sleep before them"
    a.wait_value(words, 2**40, width=64, op="eq")  # met by the stream's own write
    settle(a)
    assert words.tolist() == [2**40, 5, 7, 9]
    a.close()


def test_a_semaphore_in_ipc_memory_orders_two_processes_both_ways(need_torch):
    import _ipc_gpu_workers as w
    from _ipc_gpu_workers import finish, spawn

    # t: [ours, the child's copy of it, theirs, our copy of it]
    t = torch.zeros(4, dtype=torch.int64, device="cuda:0")
    words = torch.zeros(2, dtype=torch.int32, device="cuda:0")  # [released, answered]
    torch.cuda.synchronize()
    p, inbox, outbox = spawn("semaphore_peer", t, words)
    try:
        s = custream.Stream()
        with torch.cuda.stream(w.torch_stream(s)):
            torch.cuda._sleep(w.SLEEP)
            t[0].fill_(7)
        s.write_value(words, 1)  # the release, after the write the sleep delays
        s.wait_value(words[1:], 1, op="eq")  # our stream waits for the child's answer
        with torch.cuda.stream(w.torch_stream(s)):
            t[3].copy_(t[2])
        assert outbox.get(timeout=60) == ("done", 7), "the child's copy ran before our write"
        settle(s)
        assert int(t[3].item()) == 9, "our copy ran before the child's answer"
        inbox.put("bye")
        finish(p)
        s.close()
    finally:
        if p.is_alive():
            p.kill()
        release(words, 1)  # a failure leaves no stream of ours waiting for the rest of the run


def test_the_conditions_and_pinned_host_memory(need_torch):
    pinned = torch.zeros(4, dtype=torch.int32).pin_memory()  # mapped under UVA: its own device address
    s = custream.Stream()
    s.write_value(pinned, 0xFFFFFFFF)  # a CPU tensor through DLPack: the driver says it is mapped
    s.synchronize()
    assert pinned[0].item() == -1, "the GPU wrote host memory"
    dev = torch.zeros(2, dtype=torch.int32, device="cuda:0")
    torch.cuda.synchronize()
    for op, value, word in [("geq", 3, 3), ("geq", 0, 1), ("eq", 4, 4), ("and", 0b100, 0b110), ("nor", 1, 2)]:
        dev[0] = word
        torch.cuda.synchronize()
        try:
            s.wait_value(dev, value, op=op)
        except custream.CudaError as e:  # a device without NOR says so by name
            assert op == "nor" and e.name == "CUDA_ERROR_NOT_SUPPORTED" and "NOR" in str(e), e
            continue
        settle(s)  # met already
    s.close()


def test_what_the_gpu_cannot_reach_is_refused_before_the_driver_queues_it(need_torch):
    cupy = try_import("cupy")
    s = custream.Stream()
    plain = (ctypes.c_uint32 * 64)()
    with pytest.raises(ValueError, match="not GPU-accessible: CUDA does not know it"):
        s.write_value(ctypes.addressof(plain), 1)
    with pytest.raises(ValueError, match="not GPU-accessible: CUDA does not know it"):
        s.write_value(torch.zeros(4, dtype=torch.int32), 1)  # pageable: DLPack's kDLCPU, asked
    if cupy is not None:
        managed = cupy.cuda.malloc_managed(64)
        with pytest.raises(ValueError, match="managed memory"):
            s.wait_value(managed.ptr, 1)
    with pytest.raises(ValueError, match="not aligned to 8 bytes"):
        s.write_value(torch.zeros(4, dtype=torch.int32, device="cuda:0")[1:], 1, width=64)
    dev = torch.zeros(2, dtype=torch.int64, device="cuda:0")
    try:
        s.wait_value(dev, 0, width=64, flush=True)
        flush = "supported"
    except custream.CudaError as e:
        assert e.name == "CUDA_ERROR_NOT_SUPPORTED" and "CAN_FLUSH_REMOTE_WRITES" in str(e), e
        flush = "not supported"
    print("flush on this device:", flush)
    s.synchronize()
    s.close()


def test_the_operations_are_captured_into_a_graph(need_torch):
    # The graph's wait is on mapped host memory that the CPU releases (see the first test).
    host = torch.zeros(1, dtype=torch.int64).pin_memory()
    words = torch.zeros(4, dtype=torch.int64, device="cuda:0")
    torch.cuda.synchronize()
    s = custream.Stream()
    try:
        capture_modes(s, host, words)
    finally:
        host[0] = 1
    s.close()


def capture_modes(s, host, words):
    for mode in ("thread_local", "global", "relaxed"):
        words.zero_()
        torch.cuda.synchronize()
        s.begin_capture(mode)
        s.wait_value(host, 1, width=64, op="geq")
        s.write_value(words[1:], 2**40, width=64)
        s.write_value(words[2:], 3)  # 32 bits, into a 64-bit word's low half
        g = s.end_capture()
        assert words.tolist() == [0, 0, 0, 0], "captured, not run"
        for _ in range(2):  # replayed: the graph waits again at each launch
            host[0] = 0
            words.zero_()
            torch.cuda.synchronize()
            g.launch(s)
            with pytest.raises(TimeoutError):  # the graph's wait holds the stream
                s.synchronize(timeout=0.05)
            assert words.tolist()[1] == 0, "the graph's writes wait behind its wait"
            host[0] = 1
            settle(s)
            assert words.tolist()[1:3] == [2**40, 3], mode
        g.close()
