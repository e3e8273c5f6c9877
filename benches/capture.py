"""Host functions and graph capture beside CuPy and raw_driver.c's C loops, each timed in turn
(timing.paired), once per GPU run (`worker.py capture`). Graph.launch is timed in batches of 100
with an untimed synchronize between, so the launch queue never fills."""

import functools

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
    """run(n): n executions of `stmt` (as timing.timer runs it), timed, `sync` called untimed every `batch`."""
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
    ns.update(cs=cp.cuda.Stream(non_blocking=True), g=(g := s.end_capture()), G=g.handle, S=s.handle,
              flaunch=floor and floor.flaunch)
    timer, batched = functools.partial(timing.timer, namespace=ns), functools.partial(batches, ns=ns, sync=s.synchronize)
    host, c_host = (lambda k: raw.raw_host_func(s.handle, k)), "C cuLaunchHostFunc + sync"
    launch = lambda k: raw.raw_graph_launch(g.handle, s.handle, 100, k)  # noqa: E731
    kernels = "\n    for _ in range(100):\n        cp.add(x, 1, out=x)\n"
    rows = [  # name, target, the loop timed, the loop it is timed in turn with, what that is
        ("launch_host_func round trip", None, timer("s.launch_host_func(noop); s.synchronize()"), host, c_host),
        ("  CuPy launch_host_func round trip", None, timer("cs.launch_host_func(noop, None); cs.synchronize()"), host, c_host),
        ("Graph.launch, 10 nodes", 1.15, batched("g.launch(s)"), launch, "C cuGraphLaunch"),
        # the least binding (floor_ext.c): what any binding that lets the GIL go adds
        *[("  least binding flaunch(G, S)", None, batched("flaunch(G, S)"), launch, "C cuGraphLaunch")] * bool(floor),
        ("capture 100 CuPy kernels (custream)", None, timer(f"s.begin_capture('relaxed')\nwith ext:{kernels}s.end_capture().close()"),
         timer(f"cs.begin_capture(mode=cp.cuda.runtime.streamCaptureModeRelaxed)\nwith cs:{kernels}cs.end_capture()"),
         "CuPy begin/end_capture")]
    out = {}
    for name, target, mine, theirs, vs in rows:
        r = timing.paired(mine, theirs, **cfg)
        out[name] = {"ns": r["ns"], "vs_ns": r["raw_ns"], "ratio": r["ratio"], "vs": vs, "target": target}
    g.close()
    return out
