"""Streams across processes, once a GPU run (capture.py adds these rows to its own): a write_value + wait_value
round trip beside raw_driver.c's loop of the same two driver calls, and an IPC event handed from another process,
beside PyTorch's (`torch.cuda.Event(interprocess=True)`): opened (and closed) in the importer, and waited on there."""

import subprocess, sys, timing

# The exporter: an IPC event of custream's and one of torch's (if importable), their handles on stdout as hex, kept
# open (recorded once, so a wait has something to wait for) until stdin closes.
EXPORTER = """
import sys, custream
s = custream.Stream()
e = custream.Event(ipc=True)
e.record(s)
print(bytes(e.ipc_handle()).hex())
try:
    import torch
    te = torch.cuda.Event(interprocess=True)
    te.record(torch.cuda.current_stream())
    print(bytes(te.ipc_handle()).hex())
except Exception as err:
    print("none", type(err).__name__, err)
sys.stdout.flush()
sys.stdin.read()
"""


def batches(stmt: str, ns: dict, sync, batch: int = 100):
    """run(n): n executions of `stmt`, an untimed `sync` every `batch` (the queue stays short), as the C loop does."""
    timed = timing.timer(stmt, ns)

    def run(n: int) -> float:
        total = 0
        for done in range(0, n, batch):
            total += timed(min(batch, n - done))
            sync()
        return total
    return run


def rows(ns: dict, raw):
    """(capture.py's row tuples (name, target, mine, theirs, what theirs is), the exporter process to end once they
    are timed, why the IPC rows are missing or None): `ns` holds custream's stream `s` and CuPy's array `x`."""
    import custream
    s, word = ns["s"], ns["x"].data.ptr  # a device word (CuPy's array), given as an int: the fast path
    ns.update(W=word, custream=custream)
    # custream asks the driver about the address before each (cuPointerGetAttributes: a freed or unmapped buffer is
    # a ValueError, not a GPU fault): against C making those same driver calls, and the two operations alone.
    mine = batches("s.write_value(W, 1); s.wait_value(W, 1)", ns, s.synchronize)
    out = [("write_value + wait_value", 1.15, mine, raw.loop("memops_checked", s.handle, word, 100),
            "C: cuPointerGetAttributes, then the operation, twice"),
           ("  the same, beside the two operations alone", None, mine, raw.loop("memops", s.handle, word, 100),
            "C cuStreamWriteValue32_v2 + cuStreamWaitValue32_v2")]
    exporter = subprocess.Popen([sys.executable, "-c", EXPORTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
    try:
        ours, theirs = exporter.stdout.readline().strip(), exporter.stdout.readline().strip()
        if not ours or not theirs or theirs.startswith("none"):
            raise RuntimeError(f"no torch IPC event to compare with: {theirs or 'the exporter failed'}")
        import torch
        ns.update(h=custream.IpcEventHandle.from_bytes(bytes.fromhex(ours)), th=bytes.fromhex(theirs), torch=torch,
                  t=custream.Stream(), ts=torch.cuda.Stream())
        exec("ev = custream.Event.from_ipc_handle(h)\ntev = torch.cuda.Event.from_ipc_handle(0, th)", ns)
        out += [
            ("IPC event open + close (importer)", None, timing.timer("custream.Event.from_ipc_handle(h).close()", ns),
             timing.timer("torch.cuda.Event.from_ipc_handle(0, th)", ns), "torch Event.from_ipc_handle (freed)"),
            ("IPC event wait (importer, opened once)", None, batches("t.wait(ev)", ns, ns["t"].synchronize),
             batches("tev.wait(ts)", ns, ns["ts"].synchronize), "torch Event.wait(stream)"),
        ]
        return out, exporter, None
    except Exception as e:
        exporter.stdin.close()
        exporter.wait(30)
        return out, None, f"{type(e).__name__}: {e}"[:300]
