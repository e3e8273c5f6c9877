"""Rows measured once a GPU run, each timed in turn with what it names: host functions, keep_alive, graph launch and
capture beside raw_driver.c's C loops and CuPy; a write_value + wait_value round trip beside the C loop of the same
driver calls; an IPC event handed from another process, opened (and closed) and waited on there, beside PyTorch's."""

import subprocess, sys

import custream, timing

# The exporter: an IPC event of custream's and one of torch's (if importable), their handles on stdout as hex, kept
# open (recorded once, so a wait has something to wait for) until stdin closes. Unbuffered (python -u).
EXPORTER = """
import sys, custream
s, e = custream.Stream(), custream.Event(ipc=True)
e.record(s)
print(bytes(e.ipc_handle()).hex())
try:
    import torch
    te = torch.cuda.Event(interprocess=True)
    te.record(torch.cuda.current_stream())
    print(bytes(te.ipc_handle()).hex())
except Exception as err:
    print("none", type(err).__name__, err)
sys.stdin.read()
"""

def ipc_rows(ns: dict, exporter) -> list:
    ours, theirs = exporter.stdout.readline().strip(), exporter.stdout.readline().strip()
    if not ours or not theirs or theirs.startswith("none"):
        raise RuntimeError(f"no torch IPC event to compare with: {theirs or 'the exporter failed'}")
    import torch
    ns.update(h=custream.IpcEventHandle.from_bytes(bytes.fromhex(ours)), th=bytes.fromhex(theirs), torch=torch,
              t=custream.Stream(), ts=torch.cuda.Stream())
    exec("ev = custream.Event.from_ipc_handle(h)\ntev = torch.cuda.Event.from_ipc_handle(0, th)", ns)
    return [("IPC event open + close (importer)", None, timing.timer("custream.Event.from_ipc_handle(h).close()", ns),
             timing.timer("torch.cuda.Event.from_ipc_handle(0, th)", ns), "torch Event.from_ipc_handle (freed)"),
            ("IPC event wait (importer, opened once)", None, timing.batches("t.wait(ev)", ns, ns["t"].synchronize),
             timing.batches("tev.wait(ts)", ns, ns["ts"].synchronize), "torch Event.wait(stream)")]

def run(cfg: dict, gpu: bool, raw, floor=None) -> dict:
    import cupy as cp
    s = custream.Stream(device=0)
    cp.cuda.Device(0).use()
    x = cp.zeros(16, dtype=cp.float32)
    cp.add(x, 1, out=x)  # its kernel loaded outside any capture
    cp.cuda.Device(0).synchronize()
    ns = {"s": s, "ext": cp.cuda.Stream.from_external(s), "x": x, "cp": cp, "custream": custream, "obj": object(),
          "noop": lambda *_: None, **{f: getattr(floor, f, None) for f in ("flaunch", "fwrite", "fwait")}}
    kernels = lambda n: f"\n    for _ in range({n}):\n        cp.add(x, 1, out=x)\n"  # noqa: E731 (in `with ext:`)
    exec(f"s.begin_capture('relaxed')\nwith ext:{kernels(10)}g = s.end_capture()", ns)  # a graph of 10 kernels
    g, W = ns["g"], x.data.ptr  # W: a device word (CuPy's array), given as an int: the fast path
    ns.update(cs=cp.cuda.Stream(non_blocking=True), G=g.handle, S=s.handle, W=W,
              relaxed=cp.cuda.runtime.streamCaptureModeRelaxed)
    timer, batches = lambda stmt: timing.timer(stmt, ns), lambda stmt: timing.batches(stmt, ns, s.synchronize)
    host = raw.loop("host_func", s.handle), "C cuLaunchHostFunc + sync"
    launch = raw.loop("graph_launch", s.handle, g.handle, 100), "C cuGraphLaunch"
    # in turn with the C loop making the checks custream makes before each (raw_driver.c's ask()), or the two alone
    checked = (raw.loop("memops_checked", s.handle, W, 100),
               "C: cuCtxGetId, cuPointerGetAttributes, the operation; twice")
    memops = batches("s.write_value(W, 1); s.wait_value(W, 1)")
    keep = batches("s.keep_alive(obj)")  # a driver callback each, posting the release to custream's thread
    rows = [  # name, target, the loop timed, the C loop (or a peer's) it is timed in turn with, what that is
        ("launch_host_func round trip", None, timer("s.launch_host_func(noop); s.synchronize()"), *host),
        ("  CuPy launch_host_func round trip", None, timer("cs.launch_host_func(noop, None); cs.synchronize()"), *host),
        ("keep_alive(obj)", 2.0, keep, raw.loop("host_func_empty", s.handle, None, 100),
         "C cuLaunchHostFunc, an empty function"),
        ("  keep_alive(obj) beside launch_host_func(lambda: None)", 1.0, keep, batches("s.launch_host_func(noop)"),
         "s.launch_host_func(lambda: None)"),
        ("Graph.launch, 10 nodes", 1.15, batches("g.launch(s)"), *launch),
        *[("  least binding flaunch(G, S)", None, batches("flaunch(G, S)"), *launch)] * bool(floor),
        ("capture 100 CuPy kernels (custream)", None,
         timer(f"s.begin_capture('relaxed')\nwith ext:{kernels(100)}s.end_capture().close()"),
         timer(f"cs.begin_capture(mode=relaxed)\nwith cs:{kernels(100)}cs.end_capture()"), "CuPy begin/end_capture"),
        ("write_value + wait_value", 1.15, memops, *checked),
        *[("  least binding fwrite(S, W, 1); fwait(S, W, 1)", None, batches("fwrite(S, W, 1); fwait(S, W, 1)"),
           *checked)] * bool(floor),
        ("  the same, beside the two operations alone", None, memops, raw.loop("memops", s.handle, W, 100),
         "C cuStreamWriteValue32_v2 + cuStreamWaitValue32_v2")]
    out, exporter = {}, subprocess.Popen([sys.executable, "-u", "-c", EXPORTER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True)
    try:  # the exporter lives until its events' rows are timed
        rows += ipc_rows(ns, exporter)
    except Exception as e:
        out["IPC rows"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        exporter.stdin.close()  # no rows of its to time: it ends now
    for name, target, mine, theirs, vs in rows:
        (ns_, vs_ns), ratio = timing.medians_and_ratios([mine, theirs], **cfg)
        out[name] = {"ns": ns_, "vs_ns": vs_ns, "ratio": ratio(0, 1), "vs": vs, "target": target}
    exporter.stdin.close()
    exporter.wait(30)
    g.close()
    return out
