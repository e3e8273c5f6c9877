"""Host functions and graph capture beside CuPy and raw_driver.c's C loops, timed in turn, once a GPU run; and
ipc.py's rows (stream memory operations, IPC events)."""

import custream, ipc, timing

def cupy_on(s) -> dict:
    """CuPy on device 0 with custream's stream `s` (`ext`), its kernel loaded outside any capture."""
    import cupy as cp
    cp.cuda.Device(0).use()
    x = cp.zeros(16, dtype=cp.float32)
    cp.add(x, 1, out=x)
    cp.cuda.Device(0).synchronize()
    return {"s": s, "ext": cp.cuda.Stream.from_external(s), "x": x, "cp": cp}

def batches(stmt: str, ns: dict, sync, batch: int = 100):
    """run(n): n executions of `stmt`, with an untimed `sync` every `batch`, as raw_driver.c's graph_launch."""
    timed = timing.timer(stmt, ns)

    def run(n: int) -> float:
        total = 0
        for done in range(0, n, batch):
            total += timed(min(batch, n - done))
            sync()
        return total
    return run

def run(cfg: dict, gpu: bool, raw, floor=None) -> dict:
    s = custream.Stream(device=0)
    ns = {**cupy_on(s), "noop": lambda *_: None, "flaunch": floor and floor.flaunch}
    kernels = lambda n: f"\n    for _ in range({n}):\n        cp.add(x, 1, out=x)\n"  # noqa: E731 (in `with ext:`)
    exec(f"s.begin_capture('relaxed')\nwith ext:{kernels(10)}g = s.end_capture()", ns)  # a graph of 10 kernels
    g = ns["g"]
    ns.update(cs=ns["cp"].cuda.Stream(non_blocking=True), G=g.handle, S=s.handle,
              relaxed=ns["cp"].cuda.runtime.streamCaptureModeRelaxed)
    timer = lambda stmt: timing.timer(stmt, ns)  # noqa: E731
    host = raw.loop("host_func", s.handle), "C cuLaunchHostFunc + sync"
    launch = raw.loop("graph_launch", s.handle, g.handle, 100), "C cuGraphLaunch"
    rows = [  # name, target, the loop timed, the C loop (or a peer's) it is timed in turn with, what that is
        ("launch_host_func round trip", None, timer("s.launch_host_func(noop); s.synchronize()"), *host),
        ("  CuPy launch_host_func round trip", None, timer("cs.launch_host_func(noop, None); cs.synchronize()"), *host),
        ("Graph.launch, 10 nodes", 1.15, batches("g.launch(s)", ns, s.synchronize), *launch),
        *[("  least binding flaunch(G, S)", None, batches("flaunch(G, S)", ns, s.synchronize), *launch)] * bool(floor),
        ("capture 100 CuPy kernels (custream)", None,
         timer(f"s.begin_capture('relaxed')\nwith ext:{kernels(100)}s.end_capture().close()"),
         timer(f"cs.begin_capture(mode=relaxed)\nwith cs:{kernels(100)}cs.end_capture()"), "CuPy begin/end_capture")]
    more, exporter, why = ipc.rows(ns, raw)  # its exporter process lives until its rows are timed
    out = {"IPC rows": {"error": why}} if why else {}
    for name, target, mine, theirs, vs in rows + more:
        r = timing.paired(mine, theirs, **cfg)
        out[name] = {"ns": r["ns"], "vs_ns": r["raw_ns"], "ratio": r["ratio"], "vs": vs, "target": target}
    if exporter:
        exporter.stdin.close()
        exporter.wait(30)
    g.close()
    return out
