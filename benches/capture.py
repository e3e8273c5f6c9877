"""Host functions and graph capture beside CuPy and raw_driver.c's C loops, timed in turn
(timing.paired), once per GPU run (`worker.py capture`): the launch_host_func round trip
(custream, CuPy), Graph.launch of 10 captured CuPy kernels (<= 1.15x cuGraphLaunch, in
batches of 100 with an untimed synchronize between), capturing 100 CuPy kernels."""

import ctypes

import custream
import timing


def batches(stmt, ns, sync, batch=100):
    """run(n): n executions of `stmt` (compiled into the loop, as timing.timer does), timed,
    with `sync` called untimed after every `batch`."""
    timed = timing.timer(stmt, ns)

    def run(n):
        total = 0
        for done in range(0, n, batch):
            total += timed(min(batch, n - done))
            sync()
        return total

    return run


def run(raw_path: str, cfg: dict, floor=None) -> dict:
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

    ns = {"s": s, "cs": cs, "ext": ext, "x": x, "cp": cp, "noop": lambda *_: None}
    host = lambda k: raw.raw_host_func(s.handle, k)  # noqa: E731
    row("launch_host_func round trip", None, timing.timer("s.launch_host_func(noop); s.synchronize()", ns), host, "C cuLaunchHostFunc + sync")
    row("  CuPy launch_host_func round trip", None, timing.timer("cs.launch_host_func(noop, None); cs.synchronize()", ns), host, "C cuLaunchHostFunc + sync")
    s.begin_capture("relaxed")
    with ext:
        for _ in range(10):
            cp.add(x, 1, out=x)
    g = s.end_capture()
    launch = lambda k: raw.raw_graph_launch(g.handle, s.handle, 100, k)  # noqa: E731
    row("Graph.launch, 10 nodes", 1.15, batches("g.launch(s)", {"g": g, "s": s}, s.synchronize), launch, "C cuGraphLaunch")
    if floor:  # the least binding (floor_ext.c): what any binding that lets the GIL go adds
        env = {"flaunch": floor.flaunch, "G": g.handle, "S": s.handle}
        row("  least binding flaunch(G, S)", None, batches("flaunch(G, S)", env, s.synchronize), launch, "C cuGraphLaunch")
    kernels = "\n    for _ in range(100):\n        cp.add(x, 1, out=x)\n"
    row("capture 100 CuPy kernels (custream)", None, timing.timer(f"s.begin_capture('relaxed')\nwith ext:{kernels}s.end_capture().close()", ns),
        timing.timer(f"cs.begin_capture(mode=cp.cuda.runtime.streamCaptureModeRelaxed)\nwith cs:{kernels}cs.end_capture()", ns), "CuPy begin/end_capture")
    g.close()
    return rows
