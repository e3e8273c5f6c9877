"""A focused GPU workload for compute-sanitizer (scripts/sanitizer/sanitizer-check.sh): owned, borrowed
and default streams, events, waits, real kernels from CuPy and/or PyTorch queued on custream
streams, threads, close() racing an in-flight synchronize(), host functions (from several
threads, raising, inside captures), graph capture in the three modes with a forked and
joined stream, and (with CuPy) ``keep_alive`` holding a dropped pinned buffer through a copy.
Prints "workload ok".
"""

import os
import sys
import threading
import time

import custream
from custream import Event, Stream, as_stream


# Small arrays: memcheck instruments every access, and the point is custream's use of the
# streams, not throughput.
N = 1 << 12


def cupy_kernels(s):
    try:
        import cupy
    except ImportError:
        return False
    with cupy.cuda.ExternalStream(s.handle):
        a = cupy.arange(N, dtype=cupy.int64)
        b = (a * 2 + 1).sum()
        c = cupy.empty_like(a)
        c[...] = a[::-1]
    s.synchronize()
    assert int(b) == N**2 and int(c[0]) == N - 1
    # A CuPy-made stream wrapped through the protocol or its handle.
    cs = cupy.cuda.Stream(non_blocking=True)
    w = as_stream(cs) if hasattr(cs, "__cuda_stream__") else Stream.from_handle(cs.ptr, owner=cs)
    with cs:
        cupy.ones(N).sum()
    s.wait(w)
    w.synchronize()
    w.close()
    return True


def torch_kernels(s):
    try:
        import torch
    except ImportError:
        return False
    if not torch.cuda.is_available():
        return False
    ts = torch.cuda.ExternalStream(s.handle)
    with torch.cuda.stream(ts):
        x = torch.arange(N, device="cuda", dtype=torch.int64)
        y = (x * 2 + 1).sum()
    s.synchronize()
    assert y.item() == N**2
    other = torch.cuda.Stream()
    w = as_stream(other) if hasattr(other, "__cuda_stream__") else Stream.from_handle(other.cuda_stream, owner=other)
    with torch.cuda.stream(other):
        torch.ones(N, device="cuda").sum()
    s.wait(w)
    w.synchronize()
    return True


def in_threads(target, n=4):
    """Run target(k) for k in range(n), each in its own thread, and wait for them all."""
    threads = [threading.Thread(target=target, args=(k,)) for k in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def capture_work(peer):
    """(queue(s), check()) for the capture step: in-place kernels on memory made beforehand
    (a capture allocates nothing), queued through `peer` on a custream stream."""
    if peer == "cupy":
        import cupy

        x = cupy.arange(N, dtype=cupy.float32)
        y = cupy.empty_like(x)
        on = getattr(cupy.cuda.Stream, "from_external", None) or (lambda s: cupy.cuda.ExternalStream(s.handle, 0))

        def queue(s):
            with on(s):
                cupy.multiply(x, 2, out=y)
                cupy.add(y, 1, out=y)

        def check():
            assert float(y[N - 1]) == 2 * (N - 1) + 1
    else:
        import torch

        x = torch.arange(N, dtype=torch.float32, device="cuda:0")
        y = torch.empty_like(x)

        def queue(s):
            with torch.cuda.stream(torch.cuda.ExternalStream(s.handle, device=0)):
                torch.mul(x, 2, out=y)
                y.add_(1)

        def check():
            assert float(y[N - 1]) == 2 * (N - 1) + 1
    queue_eagerly = Stream(device=0)
    queue(queue_eagerly)  # load the kernels outside any capture
    queue_eagerly.synchronize()
    queue_eagerly.close()
    return queue, check


def callbacks_and_capture(peer):
    queue, check = capture_work(peer)
    s, side = Stream(device=0), Stream(device=0)
    ran = []
    queue(s)
    for i in range(50):
        s.launch_host_func(ran.append, i)
    s.synchronize()
    assert ran == list(range(50))
    # From several threads at once, onto one stream and their own.
    def launcher(k):
        mine = Stream(device=0)
        for i in range(25):
            s.launch_host_func(ran.append, (k, i))
            mine.launch_host_func(ran.append, (k, -i))
        mine.synchronize()
        mine.close()
    in_threads(launcher)
    s.synchronize()
    assert len(ran) == 50 + 4 * 50
    caught, hook = [], sys.unraisablehook
    sys.unraisablehook = caught.append
    s.launch_host_func(lambda: 1 / 0)
    s.synchronize()
    sys.unraisablehook = hook
    assert len(caught) == 1 and caught[0].exc_type is ZeroDivisionError
    for mode in ("thread_local", "global", "relaxed"):
        s.begin_capture(mode)
        queue(s)
        side.wait(s.record())
        side.launch_host_func(ran.append, mode)
        s.wait(side.record())
        g = s.end_capture()
        for _ in range(3):
            g.launch(s)
        s.synchronize()
        check()
        g.close()
    assert ran[-3:] == ["relaxed"] * 3
    s.close()
    side.close()


T0 = time.monotonic()


def keep_alive_pinned_copy():
    """``keep_alive``: a pinned host buffer the caller dropped at once stays allocated until the
    copy queued from it (behind a kernel) is done; the copy reads what was written. With CuPy."""
    import cupy
    import numpy

    s = Stream(device=0)
    for round_ in range(4):
        dst = cupy.zeros(N, dtype=cupy.uint8)
        pinned = cupy.cuda.alloc_pinned_memory(N)
        host = numpy.frombuffer(pinned, dtype=numpy.uint8, count=N)
        host[:] = round_ + 1
        on_s = cupy.cuda.ExternalStream(s.handle)
        with on_s:
            (cupy.arange(1 << 16, dtype=cupy.int64) * 3).sum()  # queued ahead of the copy
        dst.set(host, stream=on_s)
        s.keep_alive(host)
        del host, pinned  # custream's reference is the buffer's last
        s.synchronize()
        assert int((dst == round_ + 1).sum()) == N, round_
    s.close()


def step(name):
    # Progress in the tool's log, with the time taken: under memcheck each new kernel
    # loads slowly.
    print(f"workload: {name} ({time.monotonic() - T0:.1f} s)", flush=True)


def main():
    import faulthandler

    # Under memcheck this workload hung in its threads section (2026-12-02): one thread in
    # Stream() while custream held the GIL across its driver calls, one in a CuPy kernel
    # launch, the main thread waiting for the GIL. custream now releases the GIL around
    # every driver call that may block (after which the threads got further; see `work`).
    # Should anything stall again, every thread's Python stack goes to the log before the
    # tool's timeout.
    faulthandler.dump_traceback_later(int(os.environ.get("WORKLOAD_STALL_S", "150")), exit=True)
    assert custream.is_available(), "no GPU"
    s = Stream(device=0)
    # CuPy when present (lighter under the tools); PyTorch otherwise, or when asked for.
    if os.environ.get("WORKLOAD_PEER") != "torch" and cupy_kernels(s):
        kernels, peer = cupy_kernels, "cupy"
    elif torch_kernels(s):
        kernels, peer = torch_kernels, "torch"
    else:
        raise SystemExit("needs CuPy or PyTorch for real kernels")

    step(f"kernels through {peer}")
    # Streams, events and waits.
    t = Stream(device=0, non_blocking=False)
    start, end = Event(device=0, timing=True), Event(device=0, timing=True)
    start.record(s)
    kernels(s)
    end.record(s)
    t.wait(end)
    t.wait(s)
    end.synchronize()
    assert start.elapsed_time(end) >= 0
    ev = s.record()
    t.wait(ev)
    t.synchronize()
    for d in (custream.DEFAULT_STREAM, custream.LEGACY_DEFAULT_STREAM, custream.PER_THREAD_DEFAULT_STREAM):
        d.synchronize()
        d.query()
    b = Stream.from_handle(s.handle, owner=s)
    assert b.device == 0
    b.synchronize()
    b.close()

    step("streams, events, waits, default tokens")
    # Threads: each creates, waits on a shared stream, records, synchronizes and closes its
    # own stream concurrently; the kernels queued on them are launched one thread at a time.
    # Under memcheck, four threads launching CuPy kernels at once hung, every thread inside a
    # CuPy call and none in custream (2026-12-02, the faulthandler dump). Serializing the
    # launches keeps that interaction of CuPy and the tool out of what this checks: custream
    # used from many threads at once.
    launch = threading.Lock()

    def work(k):
        mine = Stream(device=0)
        for _ in range(2):
            with launch:
                kernels(mine)
            mine.wait(s)
            mine.record().synchronize()
            Stream.from_handle(mine.handle, owner=mine).synchronize()
        mine.close()

    in_threads(work)

    step("threads")
    # close() while another thread synchronizes the same stream.
    def sync(r):
        try:
            r.synchronize()
        except ValueError:  # closed first: the documented outcome
            pass

    for _ in range(10):
        r = Stream(device=0)
        kernels(r)  # one thread launches here
        th = threading.Thread(target=sync, args=(r,))
        th.start()
        r.close()
        th.join()

    step("close racing synchronize")
    callbacks_and_capture(peer)
    step("host functions and capture")
    if peer == "cupy":
        keep_alive_pinned_copy()
        step("keep_alive of a pinned buffer behind a copy")
    for _ in range(200):
        Stream(device=0).close()
        Event(device=0).close()
    for x in (s, t, start, end, ev):
        x.close()
    print("workload ok with", peer)


if __name__ == "__main__":
    main()
