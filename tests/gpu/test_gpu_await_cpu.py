"""Awaiting many streams costs no CPU (issue 52): N streams, each behind a kernel, awaited
together with ``asyncio.gather``, in a fresh process (no notifier made yet, so any that the
waits need are made while the GPU is busy) and again in the same process (notifiers made).

Process CPU time over the wait's wall time must stay under 20 ms per second waited with 1 s
kernels, fresh and not; and the CPU must not grow with the wait: the same N awaits behind
0.3 s and behind 1 s kernels differ in CPU by under 20 ms per second of difference. What
remains is paid once per await, whatever the wait: arming it (``s.record()``, asyncio's task,
the notifier's driver calls) and completing it; the arming is printed per await (the CPU until
every task has run to its first suspension). Each N runs in a subprocess of its own under the
watchdog (custream_gpu_helpers.py's ``run_watched``); the CPU of each thread that used any is
printed, so a failure says where it went."""

import json
import os

import pytest

from custream_gpu_helpers import peer, run_watched

pytestmark = pytest.mark.gpu

peer("cupy")

HERE = os.path.dirname(os.path.abspath(__file__))

# A fresh interpreter is the point: its first awaits find no notifier made.
SCRIPT = r"""
import asyncio, json, os, sys, time
import cupy
from custream import Stream
sys.path.insert(0, {here!r})
from custream_gpu_helpers import sleep_on as sleep  # the sleep kernel, launched with CuPy

N = {n}
cupy.cuda.Device(0).use()

def threads_cpu():
    tick, out = os.sysconf("SC_CLK_TCK"), {{}}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{{tid}}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{{tid}}/comm") as f:
                name = f.read().strip()
        except FileNotFoundError:  # a thread that ended since the listing
            continue
        out[f"{{name}}/{{tid}}"] = (int(fields[11]) + int(fields[12])) / tick
    return out

streams = [Stream(device=0) for _ in range(N)]
sleep(streams[0], 0.001)  # CuPy compiles and loads the kernel before any clock starts
streams[0].synchronize()

async def wait_all():
    waits = [asyncio.ensure_future(s.record()) for s in streams]
    await asyncio.sleep(0)  # every task ran its first step (the ready queue is in order): armed
    armed = time.process_time()
    await asyncio.gather(*waits)
    return armed

rows = {{}}
for round_, seconds in (("fresh, 1 s", 1.0), ("notifiers made, 1 s", 1.0), ("notifiers made, 0.3 s", 0.3)):
    for s in streams:
        sleep(s, seconds)
    before, cpu, wall = threads_cpu(), time.process_time(), time.monotonic()
    armed = asyncio.run(wait_all())
    wall, arm, cpu = time.monotonic() - wall, armed - cpu, time.process_time() - cpu
    assert all(s.query() for s in streams)
    after = threads_cpu()
    busy = {{k: round(v - before.get(k, 0.0), 3) for k, v in after.items() if v - before.get(k, 0.0) >= 0.01}}
    rows[round_] = dict(wall_s=round(wall, 3), cpu_s=round(cpu, 4), cpu_ms_per_s=round(cpu / wall * 1e3, 2),
                        arm_us_per_await=round(arm / N * 1e6, 1), threads=busy)
print(json.dumps(rows))
"""


@pytest.mark.parametrize("n", [1, 16, 64, 200, 1000])
def test_awaiting_n_streams_costs_no_cpu_fresh_or_not(n):
    out = run_watched(SCRIPT.format(n=n, here=HERE))
    rows = json.loads(out.strip().splitlines()[-1])
    long, short = rows["notifiers made, 1 s"], rows["notifiers made, 0.3 s"]
    growth = (long["cpu_s"] - short["cpu_s"]) / (long["wall_s"] - short["wall_s"]) * 1e3
    print(n, rows, f"CPU per second of a longer wait: {growth:.2f} ms")
    for name in ("fresh, 1 s", "notifiers made, 1 s"):
        assert rows[name]["cpu_ms_per_s"] < 20, f"{n} streams, {name}: {rows}"
    assert growth < 20, f"{n} streams: the CPU grew {growth:.1f} ms per second of a longer wait: {rows}"
