"""Host functions and graph capture, custream beside CuPy and the raw driver (raw_driver.c's
raw_host_func and raw_graph_launch), timed in turn by timing.paired; worker.py runs it once in
a GPU run (`worker.py capture`) and report.py prints its rows under the table.

- launch_host_func round trip (queue on an idle stream, then synchronize): custream and CuPy;
- Graph.launch of a 10-node graph (10 CuPy kernels captured through custream) against a C
  cuGraphLaunch loop on the same graph and stream (target <= 1.15x), in batches of 100 with an
  untimed synchronize between, so the launch queue never fills;
- capture of 100 CuPy kernels through custream against CuPy's own begin/end_capture.
"""

import ctypes
import time

import custream
import timing


def batches(body, sync=None, batch=100):
    """run(n): n calls of body, timed; with `sync`, called untimed after every `batch`."""

    def run(n):
        total = done = 0
        while done < n:
            k = min(batch, n - done) if sync else n - done
            t = time.perf_counter_ns()
            for _ in range(k):
                body()
            total += time.perf_counter_ns() - t
            done += k
            if sync:
                sync()
        return total

    return run


def run(raw_path: str, cfg: dict) -> dict:
    import cupy as cp

    raw = ctypes.CDLL(raw_path)
    p, n = ctypes.c_void_p, ctypes.c_long
    raw.raw_host_func.restype, raw.raw_host_func.argtypes = ctypes.c_double, [p, n]
    raw.raw_graph_launch.restype, raw.raw_graph_launch.argtypes = ctypes.c_double, [p, p, n, n]
    assert raw.raw_init() == 0, "raw_driver.c could not start"
    cp.cuda.Device(0).use()
    s, cs = custream.Stream(device=0), cp.cuda.Stream(non_blocking=True)
    ext = cp.cuda.Stream.from_external(s)
    x = cp.zeros(16, dtype=cp.float32)
    cp.add(x, 1, out=x)  # compile and load the kernel outside every capture
    cp.cuda.Device(0).synchronize()
    rows = {}

    def row(name, target, mine, theirs, against):
        r = timing.paired(mine, theirs, **cfg)
        rows[name] = {"ns": r["ns"], "vs_ns": r["raw_ns"], "ratio": r["ratio"], "vs": against, "target": target}

    def noop(*_):
        pass

    def c_loop(fn, *args):
        return lambda k: fn(*args, k)

    host = c_loop(raw.raw_host_func, s.handle)
    row("launch_host_func round trip", None, batches(lambda: (s.launch_host_func(noop), s.synchronize())), host, "C cuLaunchHostFunc + sync")
    row("  CuPy launch_host_func round trip", None, batches(lambda: (cs.launch_host_func(noop, None), cs.synchronize())), host, "C cuLaunchHostFunc + sync")
    s.begin_capture("relaxed")
    with ext:
        for _ in range(10):
            cp.add(x, 1, out=x)
    g = s.end_capture()
    row("Graph.launch, 10 nodes", 1.15, batches(lambda: g.launch(s), s.synchronize), c_loop(raw.raw_graph_launch, g.handle, s.handle, 100), "C cuGraphLaunch")

    def capture(begin, end, stream):
        def once():
            begin()
            with stream:
                for _ in range(100):
                    cp.add(x, 1, out=x)
            end()

        return batches(once)

    row("capture 100 CuPy kernels (custream)", None, capture(lambda: s.begin_capture("relaxed"), lambda: s.end_capture().close(), ext),
        capture(lambda: cs.begin_capture(mode=cp.cuda.runtime.streamCaptureModeRelaxed), cs.end_capture, cs), "CuPy begin/end_capture")
    g.close()
    return rows
