"""Host functions and graph capture beside CuPy and raw_driver.c's C loops, timed in turn
(timing.paired), once per GPU run (`worker.py capture`): the launch_host_func round trip
(custream, CuPy), Graph.launch of 10 captured CuPy kernels (<= 1.15x cuGraphLaunch, in
batches of 100 with an untimed synchronize between), capturing 100 CuPy kernels."""

import custream
import timing


def cupy_on(s) -> dict:
    """CuPy on device 0 with custream's stream `s` (`ext`), its kernel loaded outside any capture."""
    import cupy as cp

    cp.cuda.Device(0).use()
    x = cp.zeros(16, dtype=cp.float32)
    cp.add(x, 1, out=x)  # compile and load the kernel outside every capture
    cp.cuda.Device(0).synchronize()
    return {"s": s, "ext": cp.cuda.Stream.from_external(s), "x": x, "cp": cp}


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


def run(raw, cfg: dict, floor=None) -> dict:
    """raw: raw_driver.c, loaded (worker.raw_driver); floor: floor_ext.c, loaded, or None."""
    s = custream.Stream(device=0)
    ns = cupy_on(s)
    cp, rows = ns["cp"], {}
    ns.update(cs=cp.cuda.Stream(non_blocking=True), noop=lambda *_: None)

    def row(name, target, mine, theirs, against):
        r = timing.paired(mine, theirs, **cfg)
        rows[name] = {"ns": r["ns"], "vs_ns": r["raw_ns"], "ratio": r["ratio"], "vs": against, "target": target}

    host, sync = lambda k: raw.raw_host_func(s.handle, k), "C cuLaunchHostFunc + sync"  # noqa: E731
    row("launch_host_func round trip", None, timing.timer("s.launch_host_func(noop); s.synchronize()", ns), host, sync)
    row("  CuPy launch_host_func round trip", None,
        timing.timer("cs.launch_host_func(noop, None); cs.synchronize()", ns), host, sync)
    s.begin_capture("relaxed")
    with ns["ext"]:
        for _ in range(10):
            cp.add(ns["x"], 1, out=ns["x"])
    g = s.end_capture()
    launch = lambda k: raw.raw_graph_launch(g.handle, s.handle, 100, k)  # noqa: E731
    row("Graph.launch, 10 nodes", 1.15, batches("g.launch(s)", {"g": g, "s": s}, s.synchronize), launch, "C cuGraphLaunch")
    if floor:  # the least binding (floor_ext.c): what any binding that lets the GIL go adds
        env = {"flaunch": floor.flaunch, "G": g.handle, "S": s.handle}
        row("  least binding flaunch(G, S)", None, batches("flaunch(G, S)", env, s.synchronize), launch, "C cuGraphLaunch")
    kernels = "\n    for _ in range(100):\n        cp.add(x, 1, out=x)\n"
    row("capture 100 CuPy kernels (custream)", None,
        timing.timer(f"s.begin_capture('relaxed')\nwith ext:{kernels}s.end_capture().close()", ns),
        timing.timer(f"cs.begin_capture(mode=cp.cuda.runtime.streamCaptureModeRelaxed)\nwith cs:{kernels}cs.end_capture()", ns),
        "CuPy begin/end_capture")
    g.close()
    return rows
