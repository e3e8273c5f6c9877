"""The scale rows: how custream's costs grow with what is alive, running or queued, once per
run in a worker of their own (`worker.py scale`). With --gpu on the device; without, against
the stand-in driver (tests/standin/capture.c, built by `standin()`): custream's own cost, no
GPU work. Each row: a figure per size and its growth, the last size's over the first's.

- create + destroy with 1, 1,000 and 10,000 other custream streams alive (expect: flat); on
  the GPU timed in turn with raw_driver.c's C loop, which sees the same streams.
- current_stream(), pool.get() and query() from 1 and from 16 threads at once: the total
  calls per second (expect: no collapse); the growth is 16 threads' total over one's.
- capture of 10, 1,000 and 10,000 kernels, begin to end_capture().close(): CuPy kernels on
  the GPU (as capture.py), the stand-in's fake_kernel on the CPU (expect: linear; the growth
  is per kernel).
- launch_host_func(noop), one call timed, queued behind 1 and 10,000 host functions pending
  on a stream held by the GPU itself: a cuStreamWaitValue32 on a host word (custream's
  thread stays free), raised in a `finally`, or by a watchdog should the queue fill and a
  launch wait (expect: flat). The stand-in's queue holds 4,096 items, three a host
  function: 1,000 there.
"""

import contextlib
import ctypes
import mmap
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time

import timing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALIVE = (1, 1_000, 10_000)
THREADS = (1, 16)
KERNELS = (10, 1_000, 10_000)
PENDING = {"gpu": (1, 10_000), "cpu": (1, 1_000)}


def standin() -> str | dict:
    """tests/standin/capture.c built as a libcuda.so.1, every other entry point custream
    resolves (src/libcuda.rs) a stub returning CUDA_SUCCESS, as tests/standin/__init__.py
    builds it: its path, or {"error": ...}."""
    try:
        with open(os.path.join(ROOT, "tests", "standin", "capture.c")) as f:
            source = f.read()
        with open(os.path.join(ROOT, "src", "libcuda.rs")) as f:
            tables = re.findall(r"entry_points!\(\w+ \{(.*?)\}\);", f.read(), re.S)
    except OSError as e:
        return {"error": f"no stand-in driver: {e}"}
    defined = set(re.findall(r"^CUresult (cu\w+)\(", source, re.M))
    wanted = [n for t in tables for n in re.findall(r"^\s*(cu\w+)\(", t, re.M) if n not in defined]
    folder = tempfile.mkdtemp(prefix="custream-bench-standin-")
    with open(src := os.path.join(folder, "capture.c"), "w") as f:
        f.write(source + "\n" + "".join(f"CUresult {n}() {{ return 0; }}\n" for n in wanted))
    cc, lib = os.environ.get("CC", "gcc"), os.path.join(folder, "libcuda.so.1")
    p = subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", lib, src, "-lpthread"], check=False, capture_output=True, text=True)
    return lib if p.returncode == 0 else {"error": f"{cc} failed on the stand-in driver: {p.stderr.strip()[-400:]}"}


def row(title: str, unit: str, expect: str, points: list[dict], per: str = "", **extra) -> dict:
    """A row's figures, one a size, and its growth (per item where `per` names the item)."""
    norm = [p["value"] / (p["n"] if per else 1) for p in points]
    return {"title": title, "unit": unit, "expect": expect, "per": per, "points": points, "growth": norm[-1] / norm[0], **extra}


def alive(cfg: dict, raw_loop) -> dict:
    import custream

    others, points, ns = [], [], {"CS": custream.Stream}
    try:
        for n in ALIVE:
            others += [custream.Stream() for _ in range(n - len(others))]
            run = timing.timer("CS().close()", ns)
            if raw_loop:
                r = timing.paired(run, raw_loop("create_destroy"), **cfg)
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
    import custream

    s, pool = custream.Stream(), custream.StreamPool(4)
    ns = {"custream": custream, "s": s, "pool": pool}
    seconds = 0.05 if cfg["target_ms"] < 10 else 0.25
    rows = []
    try:
        for stmt in ("custream.current_stream()", "pool.get()", "s.query()"):
            points = []
            for n in THREADS:
                rates = [throughput(stmt, ns, n, seconds) for _ in range(max(3, cfg["repeats"] // 3))]
                points.append({"n": n, "value": statistics.median(rates)})
            rows.append(row(f"{stmt}, N threads at once", "calls/s", "no collapse", points, stmt=stmt))
    finally:
        pool.close()
        s.close()
    return rows


def capture(cfg: dict, gpu: bool) -> dict:
    import custream

    s = custream.Stream()
    if gpu:  # CuPy kernels on custream's stream, as capture.py
        import cupy as cp

        cp.cuda.Device(0).use()
        x = cp.zeros(16, dtype=cp.float32)
        cp.add(x, 1, out=x)  # compile and load the kernel outside every capture
        cp.cuda.Device(0).synchronize()
        ns = {"s": s, "ext": cp.cuda.Stream.from_external(s), "x": x, "cp": cp}
        body, kernel = "with ext:\n    for _ in range(N):\n        cp.add(x, 1, out=x)\n", "cp.add(x, 1, out=x)"
    else:  # the stand-in's kernel: a node of the capture
        lib = ctypes.CDLL(os.environ["CUSTREAM_LIBCUDA"])
        lib.fake_kernel.argtypes = [ctypes.c_void_p, ctypes.c_int]
        ns = {"s": s, "k": lib.fake_kernel, "H": s.handle}
        body, kernel = "for _ in range(N):\n    k(H, 0)\n", "the stand-in's fake_kernel"
    stmt = "s.begin_capture('relaxed')\n" + body + "s.end_capture().close()"
    points = []
    try:
        for n in KERNELS:
            points.append({"n": n, "value": timing.measure(stmt, {**ns, "N": n}, **cfg)["ns"]})
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
    """Holds a stream: `with blocker.hold(s) as held:` queues a wait until a host word reads 1
    (a cuStreamWaitValue32, as custream's own hand-off does). The word is raised on leaving,
    in a `finally`, and the stream synchronized; and by a watchdog thread after `timeout`
    seconds, should a launch wait for room in a full queue meanwhile (the launching thread
    waits in the driver, GIL released): `held["fired"]` then says how many were queued."""

    def __init__(self, cu):
        self.cu, self.page = cu, mmap.mmap(-1, mmap.PAGESIZE)
        self.word = ctypes.c_uint32.from_buffer(self.page)
        self.host, self.device = ctypes.c_void_p(ctypes.addressof(self.word)), ctypes.c_uint64()
        assert cu.cuMemHostRegister_v2(self.host, ctypes.c_size_t(mmap.PAGESIZE), 0x3) == 0  # portable, device-mapped
        assert cu.cuMemHostGetDevicePointer_v2(ctypes.byref(self.device), self.host, 0) == 0

    @contextlib.contextmanager
    def hold(self, s, timeout: float = 5.0):
        held = {"queued": 0, "fired": None}

        def release(watchdog: bool) -> None:
            if watchdog and not self.word.value:
                held["fired"] = held["queued"]
            self.word.value = 1

        self.word.value = 0
        r = self.cu.cuStreamWaitValue32_v2(ctypes.c_void_p(s.handle), self.device, ctypes.c_uint32(1), 1)  # _EQ
        assert r == 0, f"cuStreamWaitValue32_v2 failed: {r}"
        watchdog = threading.Timer(timeout, release, (True,))
        watchdog.daemon = True
        watchdog.start()
        try:
            yield held
        finally:
            watchdog.cancel()
            release(False)
            s.synchronize()

    def close(self) -> None:
        if hasattr(self.cu, "cuMemHostUnregister"):  # the stand-in has none
            self.cu.cuMemHostUnregister(self.host)
        del self.word
        self.page.close()


def pending(cfg: dict, gpu: bool) -> dict:
    import custream

    s, blocker, points = custream.Stream(), Blocker(driver()), []
    noop = lambda *_: None  # noqa: E731
    try:
        for n in PENDING["gpu" if gpu else "cpu"]:
            samples: list[float] = []
            deadline = time.perf_counter() + cfg["budget_s"]
            while len(samples) < 4 * cfg["repeats"] and (len(samples) < 3 or time.perf_counter() < deadline):
                with blocker.hold(s) as held:
                    for i in range(n):
                        s.launch_host_func(noop)
                        held["queued"] = i + 1
                    t0 = time.perf_counter_ns()
                    s.launch_host_func(noop)
                    samples.append(time.perf_counter_ns() - t0)
                if held["fired"] is not None:
                    so_far = "; ".join(f"behind {p['n']:,}: {p['value']:,.0f} ns" for p in points)
                    raise RuntimeError(f"the stream's queue filled: behind {held['fired']:,} pending host functions "
                                       f"launch_host_func waited for the blocker's release ({so_far or 'no figure'})")
            points.append({"n": n, "value": statistics.median(samples), "samples": len(samples)})
    finally:
        blocker.close()
        s.close()
    return row("launch_host_func(f) behind N pending, stream held", "ns", "flat", points, stmt="s.launch_host_func(noop)")


def run(cfg: dict, gpu: bool, raw_loop=None) -> list[dict]:
    """Every scale row; one that fails is reported as {"title", "error"}."""
    rows: list[dict] = []
    for title, measure in [("create + destroy, N other streams alive", lambda: alive(cfg, raw_loop)),
                           ("N threads at once", lambda: threaded(cfg)),
                           ("capture N kernels", lambda: capture(cfg, gpu)),
                           ("launch_host_func(f) behind N pending, stream held", lambda: pending(cfg, gpu))]:
        try:
            got = measure()
            rows += got if isinstance(got, list) else [got]
        except Exception as e:
            rows.append({"title": title, "error": f"{type(e).__name__}: {e}"[:400]})
    return rows
