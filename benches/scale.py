"""The scale rows: how custream's costs grow with what is alive, running or queued, once per
run in a worker of their own (`worker.py scale`). With --gpu on the device; without, against
the stand-in driver (tests/standin/capture.c): custream's own cost, no GPU work. Each row: a
figure per size and its growth, the last size's over the first's (docs/benchmarks.md lists
the rows and what each expects).

The pending-host-function row holds streams with the GPU itself: a cuStreamWaitValue32 on a
host word (custream's thread stays free), raised in a `finally`, or by a watchdog should a
queue fill and a launch wait. A held stream's queue takes about 1,020 commands of any kind
(measured on an H200: memsets and stream writes alike block at the 1,020th; a second held
stream takes its own 1,020), and custream's launch_host_func is one (a cuStreamBatchMemOp):
N host functions pending take ceil(N / 1,000) streams, all held by the one word, the timed
call on the last. The stand-in's one queue holds 4,096 items, three a host function: 1,000.
"""

import contextlib
import ctypes
import math
import mmap
import os
import statistics
import sys
import tempfile
import threading
import time

import timing

ALIVE, THREADS, KERNELS = (1, 1_000, 10_000), (1, 16), (10, 1_000, 10_000)
PENDING, PER_STREAM = {"gpu": (1, 10_000), "cpu": (1, 1_000)}, 1_000
PENDING_TITLE = f"launch_host_func(f) with N host functions pending, {PER_STREAM:,} per held stream"


def standin() -> str | dict:
    """tests/standin/capture.c built as a libcuda.so.1 by tests/standin (the entry points it
    does not model generated as stubs): its path, or {"error": ...}."""
    sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    try:
        import standin  # the CPU tests' builder (it needs pytest, to skip with)

        return str(standin.build("capture.c", standin.pathlib.Path(tempfile.mkdtemp(prefix="custream-bench-"))))
    except BaseException as e:  # pytest's skip (no compiler, no sources) is no Exception
        if isinstance(e, KeyboardInterrupt):
            raise
        return {"error": f"no stand-in driver: {type(e).__name__}: {e}"}


def row(title: str, unit: str, expect: str, points: list[dict], per: str = "", **extra) -> dict:
    """A row's figures, one a size, and its growth (per item where `per` names the item)."""
    norm = [p["value"] / (p["n"] if per else 1) for p in points]
    return {"title": title, "unit": unit, "expect": expect, "per": per, "points": points, "growth": norm[-1] / norm[0], **extra}


def alive(cfg: dict, raw_loop) -> dict:
    """create + destroy with N other streams alive; on the GPU in turn with raw_driver.c's loop."""
    import custream

    others, points, ns = [], [], {"CS": custream.Stream}
    try:
        for n in ALIVE:
            others += [custream.Stream() for _ in range(n - len(others))]
            if raw_loop:
                r = timing.paired(timing.timer("CS().close()", ns), raw_loop("create_destroy"), **cfg)
                points.append({"n": n, "value": r["ns"], "raw_ns": r["raw_ns"], "ratio": r["ratio"]})
            else:
                points.append({"n": n, "value": timing.measure("CS().close()", ns, **cfg)["ns"]})
    finally:
        for s in others:
            s.close()
    return row("create + destroy, N other streams alive", "ns", "flat", points, stmt="custream.Stream().close()",
               **({"raw_growth": points[-1]["raw_ns"] / points[0]["raw_ns"]} if raw_loop else {}))


def throughput(stmt: str, ns: dict, threads: int, seconds: float) -> float:
    """Calls per second of `stmt`, all `threads` together, each calling it in batches for
    `seconds` from a common start."""
    run, counts, start = timing.timer(stmt, ns), [0] * threads, threading.Barrier(threads + 1)
    run(100)  # the first calls, untimed

    def work(i: int) -> None:
        start.wait()
        while time.perf_counter() < deadline:
            run(200)
            counts[i] += 200

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    t0 = time.perf_counter()
    deadline = t0 + seconds
    start.wait()
    for t in pool:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def threaded(cfg: dict) -> list[dict]:
    """current_stream(), pool.get() and query() from 1 and 16 threads: the total calls a second."""
    import custream

    s, pool = custream.Stream(), custream.StreamPool(4)
    ns, seconds = {"custream": custream, "s": s, "pool": pool}, 0.05 if cfg["target_ms"] < 10 else 0.25
    try:
        return [row(f"{stmt}, N threads at once", "calls/s", "no collapse", stmt=stmt, points=[
            {"n": n, "value": statistics.median(throughput(stmt, ns, n, seconds) for _ in range(max(3, cfg["repeats"] // 3)))}
            for n in THREADS]) for stmt in ("custream.current_stream()", "pool.get()", "s.query()")]
    finally:
        pool.close()
        s.close()


def capture(cfg: dict, gpu: bool) -> dict:
    """begin_capture to end_capture().close() around N kernels: CuPy's on the GPU (as
    capture.py), the stand-in's fake_kernel on the CPU."""
    import custream

    s = custream.Stream()
    if gpu:
        import capture as cap

        ns, kernel = cap.cupy_on(s), "cp.add(x, 1, out=x)"
        body = f"with ext:\n    for _ in range(N):\n        {kernel}\n"
    else:  # the stand-in's kernel: a node of the capture
        lib = ctypes.CDLL(os.environ["CUSTREAM_LIBCUDA"])
        lib.fake_kernel.argtypes = [ctypes.c_void_p, ctypes.c_int]
        ns, body, kernel = {"s": s, "k": lib.fake_kernel, "H": s.handle}, "for _ in range(N):\n    k(H, 0)\n", "the stand-in's fake_kernel"
    stmt = "s.begin_capture('relaxed')\n" + body + "s.end_capture().close()"
    try:
        points = [{"n": n, "value": timing.measure(stmt, {**ns, "N": n}, **cfg)["ns"]} for n in KERNELS]
    finally:
        if s.is_capturing:
            s.end_capture().close()
        s.close()
    return row("capture N kernels, begin to end_capture().close()", "ns", "linear", points, per="kernel", stmt=kernel)


def driver():
    """The driver custream uses, through ctypes, device 0's primary context current."""
    cu = ctypes.CDLL(os.environ.get("CUSTREAM_LIBCUDA", "libcuda.so.1"))
    ctx = ctypes.c_void_p()
    assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    if hasattr(cu, "cuCtxSetCurrent"):  # the stand-in has no current context to set
        assert cu.cuCtxSetCurrent(ctx) == 0
    return cu


class Blocker:
    """Holds streams: `with blocker.hold(*streams) as held:` queues on each a wait until one
    host word reads 1 (a cuStreamWaitValue32, as custream's own hand-off does). The word is
    raised on leaving, in a `finally`, and every stream synchronized; and by a watchdog thread
    after `timeout` seconds, should a launch wait for room in a full queue meanwhile (the
    launching thread waits in the driver, GIL released): `held["fired"]` then says how many
    were queued."""

    def __init__(self, cu):
        self.cu, self.page = cu, mmap.mmap(-1, mmap.PAGESIZE)
        self.word = ctypes.c_uint32.from_buffer(self.page)
        self.host, self.device = ctypes.c_void_p(ctypes.addressof(self.word)), ctypes.c_uint64()
        assert cu.cuMemHostRegister_v2(self.host, ctypes.c_size_t(mmap.PAGESIZE), 0x3) == 0  # portable, device-mapped
        assert cu.cuMemHostGetDevicePointer_v2(ctypes.byref(self.device), self.host, 0) == 0

    @contextlib.contextmanager
    def hold(self, *streams, timeout: float = 5.0):
        held = {"queued": 0, "fired": None}

        def release(watchdog: bool) -> None:
            if watchdog and not self.word.value:
                held["fired"] = held["queued"]
            self.word.value = 1

        self.word.value = 0
        watchdog = threading.Timer(timeout, release, (True,))
        watchdog.daemon = True
        watchdog.start()
        try:
            for s in streams:
                r = self.cu.cuStreamWaitValue32_v2(ctypes.c_void_p(s.handle), self.device, ctypes.c_uint32(1), 1)  # _EQ
                assert r == 0, f"cuStreamWaitValue32_v2 failed: {r}"
            yield held
        finally:
            watchdog.cancel()
            release(False)
            for s in streams:
                s.synchronize()

    def close(self) -> None:
        if hasattr(self.cu, "cuMemHostUnregister"):  # the stand-in has none
            self.cu.cuMemHostUnregister(self.host)
        del self.word
        self.page.close()


def pending(cfg: dict, gpu: bool) -> dict:
    """One launch_host_func(noop) timed with N host functions pending, PER_STREAM a held stream."""
    import custream

    sizes = PENDING["gpu" if gpu else "cpu"]
    streams = [custream.Stream() for _ in range(math.ceil(max(sizes) / PER_STREAM))]
    blocker, points, noop = Blocker(driver()), [], lambda *_: None
    try:
        for n in sizes:
            held_streams, samples = streams[:math.ceil(n / PER_STREAM)], []
            deadline = time.perf_counter() + cfg["budget_s"]
            while len(samples) < 4 * cfg["repeats"] and (len(samples) < 3 or time.perf_counter() < deadline):
                with blocker.hold(*held_streams) as held:
                    for i in range(n):
                        held_streams[i // PER_STREAM].launch_host_func(noop)
                        held["queued"] = i + 1
                    t0 = time.perf_counter_ns()
                    held_streams[-1].launch_host_func(noop)
                    samples.append(time.perf_counter_ns() - t0)
                if held["fired"] is not None:
                    so_far = "; ".join(f"with {p['n']:,}: {p['value']:,.0f} ns" for p in points)
                    raise RuntimeError(f"a held stream's queue filled: with {held['fired']:,} host functions pending, "
                                       f"launch_host_func waited for the blocker's release ({so_far or 'no figure'})")
            points.append({"n": n, "value": statistics.median(samples), "samples": len(samples),
                           "streams": len(held_streams)})
    finally:
        blocker.close()
        for s in streams:
            s.close()
    return row(PENDING_TITLE, "ns", "flat", points, stmt="s.launch_host_func(noop)")


def run(cfg: dict, gpu: bool, raw_loop=None) -> list[dict]:
    """Every scale row; one that fails is reported as {"title", "error"}."""
    rows: list[dict] = []
    for title, measure in [("create + destroy, N other streams alive", lambda: alive(cfg, raw_loop)),
                           ("N threads at once", lambda: threaded(cfg)),
                           ("capture N kernels", lambda: capture(cfg, gpu)),
                           (PENDING_TITLE, lambda: pending(cfg, gpu))]:
        try:
            got = measure()
            rows += got if isinstance(got, list) else [got]
        except Exception as e:
            rows.append({"title": title, "error": f"{type(e).__name__}: {e}"[:400]})
    return rows
