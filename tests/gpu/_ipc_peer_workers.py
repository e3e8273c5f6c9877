"""Both processes of tests/gpu/test_gpu_ipc_peers.py: IPC events across processes between
custream and PyTorch, CuPy and cuda.core, each way.

Every scenario is the same. The producer (this process) shares 8 bytes of device memory,
zeroed, through its library's IPC memory handle, and starts the consumer (a spawned child).
Once the consumer has opened the memory and said so, the producer queues a kernel that sleeps
about half a second on the GPU and then writes VALUE, records its library's IPC event behind
it and sends the event's handle. The consumer opens the event with its library's call, checks
that it is still pending (so the wait below is real), makes its stream wait on it, reads the 8
bytes on that stream and reports. Without the wait the read would see 0.

Memory: PyTorch shares a tensor (torch.multiprocessing's CUDA IPC), CuPy a cudaMalloc'd
allocation of its own (runtime.ipcGetMemHandle; CUDA IPC opens whole allocations), and for
cuda.core, whose IPC buffers come only from IPC memory pools, the driver's cuIpcGetMemHandle
through ctypes: the events are what is under test.

A scenario returns a dict (to the test, which runs it in a pytest process of its own), or
``{"skip": reason}`` where a peer cannot do its part here. Every wait for the other process
has a time limit, and a child's exception comes back to the parent as the error.
"""

import ctypes
import importlib
import multiprocessing
import traceback

VALUE = 0x5EED_0052
SLEEP_NS = 500_000_000  # the kernel's sleep: long against a message and an open, short for a test
TORCH_SLEEP_CYCLES = 1_000_000_000  # torch.cuda._sleep: about half a second at ~2 GHz
T = 30  # seconds any one message may take

SLEEP_THEN_WRITE = r"""
extern "C" __global__ void sleep_then_write(long long *out, unsigned long long ns, long long value) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
    *(volatile long long *)out = value;
    __threadfence_system();
}
"""


class Skip(Exception):
    """A peer cannot do its part on this machine (said, not failed)."""


# ---- the two processes ------------------------------------------------------------------------


class Child:
    """The consumer, a spawned process running `target` (a function of this module) with an
    inbox and an outbox; its exception (or skip) is raised here."""

    def __init__(self, ctx, target, *args):
        self.inbox, self.outbox = ctx.Queue(), ctx.Queue()
        self.process = ctx.Process(target=_serve, args=(target, self.inbox, self.outbox, *args))

    def __enter__(self):
        self.process.start()
        return self

    def send(self, message):
        self.inbox.put(message)

    def receive(self):
        kind, payload = self.outbox.get(timeout=T)
        if kind == "error":
            raise AssertionError(f"the consumer failed:\n{payload}")
        if kind == "skip":
            raise Skip(payload)
        return payload

    def expect(self, what):
        got = self.receive()
        assert got == what, got

    def __exit__(self, *exc):
        if exc[0] is not None and self.process.is_alive():
            self.process.kill()  # the producer failed: the consumer's waits would only time out
        self.process.join(T)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(T)
            if exc[0] is None:
                raise AssertionError("the consumer hung")
        elif exc[0] is None:
            assert self.process.exitcode == 0, self.process.exitcode
        return False


def _serve(target, inbox, outbox, *args):
    """The child's entry: run `target`, sending its failure or skip to the parent."""
    try:
        globals()[target](_Parent(inbox, outbox), *args)
    except Skip as e:
        outbox.put(("skip", str(e)))
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test
        outbox.put(("error", traceback.format_exc()))


class _Parent:
    """The child's view of the two queues."""

    def __init__(self, inbox, outbox):
        self.inbox, self.outbox = inbox, outbox

    def send(self, message):
        self.outbox.put(("ok", message))

    def receive(self):
        return self.inbox.get(timeout=T)


def report(value, pending, event):
    """What a consumer sends back."""
    return {"value": value, "pending_when_opened": pending, "repr": repr(event)}


def check(result):
    """The producer's checks of what the consumer saw."""
    assert result["value"] == VALUE, f"the consumer read {result['value']:#x}, not {VALUE:#x}: it did not wait"
    assert result["pending_when_opened"], "the work was done before the consumer waited: the test proved nothing"
    return result


# ---- the driver, for cuda.core's memory and reads on any stream ----------------------------------


class Driver:
    """The few driver calls the cuda.core scenarios share memory with, through ctypes; each
    runs in the calling thread's current context (cuda.core's Device.set_current())."""

    class Handle(ctypes.Structure):
        _fields_ = [("reserved", ctypes.c_ubyte * 64)]  # c_ubyte: bytes() of it keeps every byte

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")

    def call(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} failed: CUresult {rc}")

    def alloc_zeroed(self, size):
        ptr = ctypes.c_uint64()
        self.call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(size))
        self.call("cuMemsetD8_v2", ctypes.c_uint64(ptr.value), ctypes.c_ubyte(0), ctypes.c_size_t(size))
        self.call("cuCtxSynchronize")
        return ptr.value

    def free(self, ptr):
        self.call("cuMemFree_v2", ctypes.c_uint64(ptr))

    def mem_handle(self, ptr):
        h = Driver.Handle()
        self.call("cuIpcGetMemHandle", ctypes.byref(h), ctypes.c_uint64(ptr))
        return bytes(h.reserved)

    def open_mem(self, raw):
        ptr = ctypes.c_uint64()
        h = Driver.Handle((ctypes.c_ubyte * 64)(*raw))
        self.call("cuIpcOpenMemHandle_v2", ctypes.byref(ptr), h, ctypes.c_uint(1))  # LAZY_ENABLE_PEER_ACCESS
        return ptr.value

    def close_mem(self, ptr):
        self.call("cuIpcCloseMemHandle", ctypes.c_uint64(ptr))

    def read_i64(self, ptr, stream):
        """The 8 bytes at `ptr`, copied on `stream` (after the work queued there), waited for."""
        host = ctypes.c_int64()
        self.call("cuMemcpyDtoHAsync_v2", ctypes.byref(host), ctypes.c_uint64(ptr), ctypes.c_size_t(8),
                  ctypes.c_void_p(stream))
        self.call("cuStreamSynchronize", ctypes.c_void_p(stream))
        return host.value


# ---- PyTorch ------------------------------------------------------------------------------------


def _torch_stream(torch, s):
    get = getattr(torch.cuda, "get_stream_from_external", None)
    return get(s.handle, device=0) if get else torch.cuda.ExternalStream(s.handle, device=0)


def _torch_setup():
    import torch
    import torch.multiprocessing

    torch.cuda.set_device(0)
    t = torch.zeros(1, dtype=torch.int64, device="cuda:0")
    torch.cuda.synchronize()
    return torch, torch.multiprocessing.get_context("spawn"), t


def torch_to_custream():
    """PyTorch's IPC event (its 64 bytes) opened by custream, with torch's own UUID form."""
    torch, ctx, t = _torch_setup()
    uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    device = str(uuid) if uuid is not None else 0  # '7a1f...-...' (no 'GPU-'), as torch writes it
    with Child(ctx, "custream_reads_tensor", t, device) as child:
        child.expect("ready")
        s = torch.cuda.Stream()
        ready = torch.cuda.Event(interprocess=True)  # timing off, as CUDA requires
        with torch.cuda.stream(s):
            torch.cuda._sleep(TORCH_SLEEP_CYCLES)
            t.fill_(VALUE)
        ready.record(s)
        child.send(ready.ipc_handle())  # bytes of 64: the cudaIpcEventHandle_t
        result = check(child.receive())
        child.send("done")
    result["device"] = device
    return result


def custream_reads_tensor(parent, t, device):
    import torch

    import custream

    parent.send("ready")
    raw = parent.receive()
    assert isinstance(raw, bytes) and len(raw) == 64, type(raw)
    ev = custream.Event.from_ipc_handle(raw, device=device)
    pending = ev.query() is False
    assert ev.ipc_handle().pid is None and "no exporter to watch" in repr(ev), repr(ev)
    s = custream.Stream()
    s.wait(ev)
    with torch.cuda.stream(_torch_stream(torch, s)):
        value = int(t.cpu()[0])  # copied on custream's stream, after the wait
    parent.send(report(value, pending, ev))
    parent.receive()
    ev.close()
    s.close()


def custream_to_torch():
    """custream's IPC event opened by PyTorch: torch.cuda.Event.from_ipc_handle(device, raw)."""
    torch, ctx, t = _torch_setup()
    import custream

    with Child(ctx, "torch_reads_tensor", t) as child:
        child.expect("ready")
        s = custream.Stream()
        ready = custream.Event(ipc=True)
        with torch.cuda.stream(_torch_stream(torch, s)):
            torch.cuda._sleep(TORCH_SLEEP_CYCLES)
            t.fill_(VALUE)
        ready.record(s)
        child.send(ready.ipc_handle().handle)
        result = check(child.receive())
        child.send("done")
    ready.close()
    s.close()
    return result


def torch_reads_tensor(parent, t):
    import torch

    parent.send("ready")
    raw = parent.receive()
    ev = torch.cuda.Event.from_ipc_handle(0, raw)
    pending = not ev.query()
    ts = torch.cuda.Stream()
    ts.wait_event(ev)
    with torch.cuda.stream(ts):
        value = int(t.cpu()[0])  # copied on torch's stream, after the wait
    parent.send(report(value, pending, ev))
    parent.receive()


# ---- CuPy ---------------------------------------------------------------------------------------


def _cupy_setup():
    import cupy

    cupy.cuda.Device(0).use()
    mem = cupy.cuda.Memory(8)  # an allocation of its own: CUDA IPC opens whole allocations
    buf = cupy.ndarray((1,), cupy.int64, cupy.cuda.MemoryPointer(mem, 0))
    buf.fill(0)
    kernel = cupy.RawKernel(SLEEP_THEN_WRITE, "sleep_then_write")
    kernel((1,), (1,), (buf, cupy.uint64(0), cupy.int64(0)))  # compiled and loaded now, not in the test's window
    cupy.cuda.Device(0).synchronize()
    return cupy, mem, buf, kernel, cupy.cuda.runtime.ipcGetMemHandle(mem.ptr)


def _cupy_open(handle):
    import cupy

    cupy.cuda.Device(0).use()
    ptr = cupy.cuda.runtime.ipcOpenMemHandle(handle)
    arr = cupy.ndarray((1,), cupy.int64, cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, 8, None), 0))
    return cupy, ptr, arr


def cupy_to_custream():
    """CuPy's IPC event (runtime.ipcGetEventHandle: 64 bytes) opened by custream, with CuPy's
    own UUID form (the device properties' 16 bytes)."""
    cupy, mem, buf, kernel, handle = _cupy_setup()
    device = cupy.cuda.runtime.getDeviceProperties(0).get("uuid", 0)
    with Child(multiprocessing.get_context("spawn"), "custream_reads_cupy_memory", handle, device) as child:
        child.expect("ready")
        s = cupy.cuda.Stream(non_blocking=True)
        ready = cupy.cuda.Event(block=False, disable_timing=True, interprocess=True)
        with s:
            kernel((1,), (1,), (buf, cupy.uint64(SLEEP_NS), cupy.int64(VALUE)))
        ready.record(s)
        child.send(cupy.cuda.runtime.ipcGetEventHandle(ready.ptr))
        result = check(child.receive())
        child.send("done")
    result["device"] = device.hex() if isinstance(device, bytes) else device
    del mem
    return result


def custream_reads_cupy_memory(parent, handle, device):
    import custream

    cupy, ptr, arr = _cupy_open(handle)
    parent.send("ready")
    raw = parent.receive()
    ev = custream.Event.from_ipc_handle(raw, device=device)
    pending = ev.query() is False
    s = custream.Stream()
    s.wait(ev)
    with cupy.cuda.ExternalStream(s.handle):
        value = int(arr.get()[0])  # copied on custream's stream, after the wait
    parent.send(report(value, pending, ev))
    parent.receive()
    ev.close()
    s.close()
    del arr
    cupy.cuda.runtime.ipcCloseMemHandle(ptr)


def custream_to_cupy():
    """custream's IPC event opened by CuPy: runtime.ipcOpenEventHandle(raw)."""
    cupy, mem, buf, kernel, handle = _cupy_setup()
    import custream

    with Child(multiprocessing.get_context("spawn"), "cupy_reads_memory", handle) as child:
        child.expect("ready")
        s = custream.Stream()
        ready = custream.Event(ipc=True)
        with cupy.cuda.ExternalStream(s.handle):
            kernel((1,), (1,), (buf, cupy.uint64(SLEEP_NS), cupy.int64(VALUE)))
        ready.record(s)
        child.send(ready.ipc_handle().handle)
        result = check(child.receive())
        child.send("done")
    ready.close()
    s.close()
    del mem
    return result


def cupy_reads_memory(parent, handle):
    cupy, ptr, arr = _cupy_open(handle)
    runtime = cupy.cuda.runtime
    parent.send("ready")
    raw = parent.receive()
    ev = runtime.ipcOpenEventHandle(raw)  # a cudaEvent_t, as an int
    status = runtime.eventQuery(ev)  # cudaSuccess (0) or cudaErrorNotReady (600)
    assert status in (0, 600), status
    s = cupy.cuda.Stream(non_blocking=True)
    runtime.streamWaitEvent(s.ptr, ev, 0)
    with s:
        value = int(arr.get()[0])  # copied on CuPy's stream, after the wait
    parent.send(report(value, status == 600, f"cudaEvent_t {ev:#x}"))
    parent.receive()
    runtime.eventDestroy(ev)
    del arr
    runtime.ipcCloseMemHandle(ptr)


# ---- cuda.core ----------------------------------------------------------------------------------


def _cuda_core_setup():
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions

    dev = Device(0)
    dev.set_current()
    try:
        code = Program(SLEEP_THEN_WRITE, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}")).compile("cubin")
    except Exception as e:  # noqa: BLE001 - no NVRTC is an environment gap, not a bug
        raise Skip(f"cuda.core cannot compile kernels here (NVRTC): {type(e).__name__}: {e}") from None
    drv = Driver()
    ptr = drv.alloc_zeroed(8)
    launch_args = (LaunchConfig(grid=1, block=1), code.get_kernel("sleep_then_write"), ptr,
                   ctypes.c_uint64(SLEEP_NS), ctypes.c_int64(VALUE))
    return dev, drv, ptr, launch_args


def cuda_core_to_custream():
    """cuda.core's IPC event: custream opens its IPCEventDescriptor itself (pickled across, as
    cuda.core sends it), with cuda.core's UUID form (Device.uuid)."""
    from cuda.core import EventOptions, launch

    dev, drv, ptr, launch_args = _cuda_core_setup()
    device = dev.uuid
    with Child(multiprocessing.get_context("spawn"), "custream_reads_driver_memory", drv.mem_handle(ptr),
               device) as child:
        child.expect("ready")
        s = dev.create_stream()
        launch(s, *launch_args)
        ready = s.record(options=EventOptions(ipc_enabled=True))
        get = getattr(ready, "get_ipc_descriptor", None)
        child.send(get() if get else ready.ipc_descriptor)
        result = check(child.receive())
        child.send("done")
    ready.close()
    s.close()
    drv.free(ptr)
    result["device"] = str(device)
    return result


def custream_reads_driver_memory(parent, handle, device):
    from cuda.core import Device

    import custream

    Device(0).set_current()
    drv = Driver()
    ptr = drv.open_mem(handle)
    parent.send("ready")
    descriptor = parent.receive()
    assert type(descriptor).__name__ == "IPCEventDescriptor", type(descriptor)
    ev = custream.Event.from_ipc_handle(descriptor, device=device)
    pending = ev.query() is False
    s = custream.Stream()
    s.wait(ev)
    value = drv.read_i64(ptr, s.handle)  # copied on custream's stream, after the wait
    parent.send(report(value, pending, ev))
    parent.receive()
    ev.close()
    s.close()
    drv.close_mem(ptr)


def custream_to_cuda_core():
    """custream's IPC event opened by cuda.core: Event.from_ipc_descriptor() of a descriptor
    made from the raw 64 bytes."""
    from cuda.core import launch

    import custream

    dev, drv, ptr, launch_args = _cuda_core_setup()
    with Child(multiprocessing.get_context("spawn"), "cuda_core_reads_driver_memory", drv.mem_handle(ptr)) as child:
        child.expect("ready")
        s = custream.Stream()
        ready = custream.Event(ipc=True)
        launch(s, *launch_args)  # cuda.core launches onto custream's stream (the protocol)
        ready.record(s)
        child.send(ready.ipc_handle().handle)
        result = check(child.receive())
        child.send("done")
    ready.close()
    s.close()
    drv.free(ptr)
    return result


def cuda_core_reads_driver_memory(parent, handle):
    from cuda.core import Device, Event

    dev = Device(0)
    dev.set_current()
    drv = Driver()
    ptr = drv.open_mem(handle)
    parent.send("ready")
    raw = parent.receive()
    # cuda.core opens only its own descriptor and has no public way to make one from the
    # driver's bytes: its private constructor, the one its pickling calls.
    init = None
    for module in ("cuda.core._event", "cuda.core.experimental._event"):
        try:
            init = getattr(importlib.import_module(module).IPCEventDescriptor, "_init", None)
        except (ImportError, AttributeError):
            continue
        break
    if init is None:
        raise Skip("this cuda.core has no IPCEventDescriptor._init to make a descriptor from raw bytes")
    ev = Event.from_ipc_descriptor(init(raw, False))
    pending = not ev.is_done
    s = dev.create_stream()
    s.wait(ev)
    value = drv.read_i64(ptr, int(s.handle))  # copied on cuda.core's stream, after the wait
    parent.send(report(value, pending, ev))
    parent.receive()
    ev.close()
    s.close()
    drv.close_mem(ptr)


SCENARIOS = {
    ("torch", "to custream"): torch_to_custream,
    ("torch", "from custream"): custream_to_torch,
    ("cupy", "to custream"): cupy_to_custream,
    ("cupy", "from custream"): custream_to_cupy,
    ("cuda.core", "to custream"): cuda_core_to_custream,
    ("cuda.core", "from custream"): custream_to_cuda_core,
}


def run(peer, direction):
    """One scenario, this process the producer: its result, or {"skip": reason}."""
    try:
        return SCENARIOS[(peer, direction)]()
    except Skip as e:
        return {"skip": str(e)}
