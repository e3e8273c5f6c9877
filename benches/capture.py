"""Host functions and graph capture beside CuPy and raw_driver.c's C loops, each timed in turn
(timing.paired), once per GPU run (`worker.py capture`)."""

import custream, timing

def cupy_on(s) -> dict:
    """CuPy on device 0 with custream's stream `s` (`ext`), its kernel loaded outside any capture."""
    import cupy as cp
    cp.cuda.Device(0).use()
    x = cp.zeros(16, dtype=cp.float32)
    cp.add(x, 1, out=x)
    cp.cuda.Device(0).synchronize()
    return {"s": s, "ext": cp.cuda.Stream.from_external(s), "x": x, "cp": cp}

def batches(stmt: str, ns: dict, sync, batch: int = 100):
    """run(n): n executions of `stmt`, timed, with `sync` called untimed after every `batch` (as raw_driver.c's
    graph_launch loop does), so the launch queue never fills: what is timed is the launch, not the GPU."""
    timed = timing.timer(stmt, ns)

    def run(n: int) -> float:
        total = 0
        for done in range(0, n, batch):
            total += timed(min(batch, n - done))
            sync()
        return total
    return run

def run(cfg: dict, gpu: bool, raw, floor=None) -> dict:
    """raw: raw_driver.c, loaded (worker.raw_driver); floor: floor_ext.c, loaded, or None."""
    s = custream.Stream(device=0)
    ns = {**cupy_on(s), "noop": lambda *_: None}
    cp, x = ns["cp"], ns["x"]
    s.begin_capture("relaxed")
    with ns["ext"]:
        for _ in range(10):
            cp.add(x, 1, out=x)
    g = s.end_capture()
    ns.update(cs=cp.cuda.Stream(non_blocking=True), g=g, G=g.handle, S=s.handle, flaunch=floor and floor.flaunch)
    timer = lambda stmt: timing.timer(stmt, ns)  # noqa: E731
    host, launch = raw.loop("host_func", s.handle), raw.loop("graph_launch", s.handle, g.handle, 100)
    kernels = "\n    for _ in range(100):\n        cp.add(x, 1, out=x)\n"
    rows = [  # name, target, the loop timed, the C loop (or a peer's) it is timed in turn with, what that is
        ("launch_host_func round trip", None, timer("s.launch_host_func(noop); s.synchronize()"), host,
         "C cuLaunchHostFunc + sync"),
        ("  CuPy launch_host_func round trip", None, timer("cs.launch_host_func(noop, None); cs.synchronize()"), host,
         "C cuLaunchHostFunc + sync"),
        ("Graph.launch, 10 nodes", 1.15, batches("g.launch(s)", ns, s.synchronize), launch, "C cuGraphLaunch"),
        # the least binding (floor_ext.c): what any binding that lets the GIL go adds
        *[("  least binding flaunch(G, S)", None, batches("flaunch(G, S)", ns, s.synchronize), launch,
           "C cuGraphLaunch")] * bool(floor),
        ("capture 100 CuPy kernels (custream)", None,
         timer(f"s.begin_capture('relaxed')\nwith ext:{kernels}s.end_capture().close()"),
         timer(f"cs.begin_capture(mode=cp.cuda.runtime.streamCaptureModeRelaxed)\nwith cs:{kernels}cs.end_capture()"),
         "CuPy begin/end_capture")]
    out = {}
    for name, target, mine, theirs, vs in rows:
        r = timing.paired(mine, theirs, **cfg)
        out[name] = {"ns": r["ns"], "vs_ns": r["raw_ns"], "ratio": r["ratio"], "vs": vs, "target": target}
    g.close()
    return out
