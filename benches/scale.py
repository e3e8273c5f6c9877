"""The scale rows (docs/benchmarks.md), a figure per size and the growth; without a GPU, on the stand-in driver."""

import ctypes, functools, math, os, statistics, sys, tempfile, threading, time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, closing

import custream, timing  # custream opens the driver on first use: after run() has chosen it
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))  # for standin

ALIVE, THREADS, KERNELS = (1, 1_000, 10_000), (1, 16), (10, 1_000, 10_000)
PENDING, PER_STREAM = {"gpu": (1, 10_000), "cpu": (1, 1_000)}, 1_000
PENDING_TITLE = f"launch_host_func(f) with N host functions pending, {PER_STREAM:,} per held stream"
STANDIN = "the stand-in (tests/standin/capture.c): custream's own cost, no GPU work"

def standin() -> str:
    """tests/standin/capture.c built as a libcuda.so.1 by the CPU tests' builder (it needs pytest): its path."""
    import standin
    try:
        return str(standin.build("capture.c", standin.pathlib.Path(tempfile.mkdtemp(prefix="custream-bench-"))))
    except standin.pytest.skip.Exception as e:  # no compiler or sources (pytest's Skipped: no Exception)
        raise RuntimeError(f"no stand-in driver: {e}") from None

def alive(cfg: dict, gpu: bool, raw) -> tuple[list, dict]:
    points, others = [], []
    with ExitStack() as stack:  # the others closed on leaving
        for n in ALIVE:  # on the GPU in turn with raw_driver.c's loop, which sees the same streams
            others += [stack.enter_context(closing(custream.Stream())) for _ in range(n - len(others))]
            r = timing.measure("CS().close()", {"CS": custream.Stream}, raw and raw.loop("create_destroy"), **cfg)
            points.append({"n": n, "value": r.pop("ns"), **r})  # and, paired, the C loop's figure and the ratio
    growth = {"raw_growth": points[-1]["raw_ns"] / points[0]["raw_ns"]} if raw else {}
    return points, {"stmt": "custream.Stream().close()", **growth}

def throughput(stmt: str, ns: dict, threads: int, seconds: float) -> float:
    """Calls a second of `stmt`, all `threads` together, each calling it in batches from a common start."""
    run, start = timing.timer(stmt, ns), threading.Barrier(threads + 1)
    run(100)  # the first calls, untimed

    def work() -> int:
        start.wait()
        count = 0
        while time.perf_counter() < deadline:
            run(200)
            count += 200
        return count
    with ThreadPoolExecutor(threads) as pool:
        counts = [pool.submit(work) for _ in range(threads)]
        deadline = (t0 := time.perf_counter()) + seconds
        start.wait()
    return sum(c.result() for c in counts) / (time.perf_counter() - t0)

def threaded(cfg: dict, gpu: bool, raw, stmt: str) -> tuple[list, dict]:
    with closing(custream.Stream()) as s, closing(custream.StreamPool(4)) as pool:
        ns, seconds = {"custream": custream, "s": s, "pool": pool}, 0.05 if cfg["target_ms"] < 10 else 0.25
        rates = {n: [throughput(stmt, ns, n, seconds) for _ in range(max(3, cfg["repeats"] // 3))] for n in THREADS}
    return [{"n": n, "value": statistics.median(r)} for n, r in rates.items()], {"stmt": stmt}

def capture(cfg: dict, gpu: bool, raw) -> tuple[list, dict]:
    with closing(custream.Stream()) as s:  # closed mid-capture, should a kernel fail: that ends it
        if gpu:
            import capture as cap
            ns, kernel = cap.cupy_on(s), "cp.add(x, 1, out=x)"
            body = f"with ext:\n    for _ in range(N):\n        {kernel}\n"
        else:  # the stand-in's kernel: a node of the capture
            k = ctypes.CDLL(os.environ["CUSTREAM_LIBCUDA"]).fake_kernel
            k.argtypes = [ctypes.c_void_p, ctypes.c_int]
            ns, kernel = {"s": s, "k": k, "H": s.handle}, "the stand-in's fake_kernel"
            body = "for _ in range(N):\n    k(H, 0)\n"
        stmt = f"s.begin_capture('relaxed')\n{body}s.end_capture().close()"
        return [{"n": n, "value": timing.measure(stmt, {**ns, "N": n}, **cfg)["ns"]} for n in KERNELS], {"stmt": kernel}

def pending(cfg: dict, gpu: bool, raw) -> tuple[list, dict]:
    from standin import held  # streams held behind a wait on a host word (tests/standin: it needs pytest)
    sizes, points, noop = PENDING["gpu" if gpu else "cpu"], [], lambda *_: None
    with ExitStack() as stack:  # the streams closed on leaving
        streams = [stack.enter_context(closing(custream.Stream())) for _ in range(-(-max(sizes) // PER_STREAM))]
        for n in sizes:
            on, samples, deadline = streams[:math.ceil(n / PER_STREAM)], [], time.perf_counter() + cfg["budget_s"]
            while len(samples) < 4 * cfg["repeats"] and (len(samples) < 3 or time.perf_counter() < deadline):
                with held(*on) as state:
                    for i in range(n):
                        on[i // PER_STREAM].launch_host_func(noop)
                        state["queued"] = i + 1
                    t0 = time.perf_counter_ns()
                    on[-1].launch_host_func(noop)
                    samples.append(time.perf_counter_ns() - t0)
                if state["fired"] is not None:
                    raise RuntimeError(f"a held stream's queue filled: with {state['fired']:,} host functions pending, "
                                       f"launch_host_func waited for the watchdog (figures so far: {points})")
            points.append({"n": n, "value": statistics.median(samples), "samples": len(samples), "streams": len(on)})
    return points, {"stmt": "s.launch_host_func(noop)"}

# title, unit, expect, what a figure is per (its growth too) or "", measure(cfg, gpu, raw) -> (points, extra fields)
ROWS = [("create + destroy, N other streams alive", "ns", "flat", "", alive),
        *[(f"{stmt}, N threads at once", "calls/s", "no collapse", "", functools.partial(threaded, stmt=stmt))
          for stmt in ("custream.current_stream()", "pool.get()", "s.query()")],
        ("capture N kernels, begin to end_capture().close()", "ns", "linear", "kernel", capture),
        (PENDING_TITLE, "ns", "flat", "", pending)]

def run(cfg: dict, gpu: bool, raw=None, floor=None) -> dict:
    if not gpu:  # the stand-in driver, before custream loads one
        os.environ["CUSTREAM_LIBCUDA"] = standin()
    rows: list[dict] = []
    for title, unit, expect, per, measure in ROWS:
        try:
            points, extra = measure(cfg, gpu, raw)
            norm = [p["value"] / (p["n"] if per else 1) for p in points]
            rows.append({"title": title, "unit": unit, "expect": expect, "per": per, "points": points,
                         "growth": norm[-1] / norm[0], **extra})
        except Exception as e:
            rows.append({"title": title, "error": f"{type(e).__name__}: {e}"[:400]})
    return {"driver": "the GPU's driver" if gpu else STANDIN, "rows": rows}
