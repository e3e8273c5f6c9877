"""Awaiting many streams costs no CPU (issue 52): N streams, each behind a 0.3 s kernel, awaited
together with ``asyncio.gather``, in a fresh process (no notifier made yet, so any that the
waits need are made while the GPU is busy) and again in the same process (notifiers made).
Process CPU time over the wait's wall time must stay under 20 ms per second waited. Each N runs
in a subprocess of its own under the watchdog (custream_gpu_helpers.py's ``run_watched``); the
CPU of each thread that used any is printed, so a failure says where it went."""

import json

import pytest

from custream_gpu_helpers import peer, run_watched

pytestmark = pytest.mark.gpu

peer("cupy")

SCRIPT = r"""
import asyncio, json, os, time
import cupy
from custream import Stream

N = {n}
cupy.cuda.Device(0).use()
SLEEP = cupy.RawKernel(r'''
extern "C" __global__ void sleep_ns(unsigned long long ns) {{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {{ asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); }} while (now - start < ns);
}}''', "sleep_ns")

def sleep(s, seconds):
    with cupy.cuda.ExternalStream(s.handle):
        SLEEP((1,), (1,), (cupy.uint64(int(seconds * 1e9)),))

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
    await asyncio.gather(*(s.record() for s in streams))

rows = {{}}
for round_ in ("fresh", "notifiers made"):
    for s in streams:
        sleep(s, 0.3)
    before, cpu, wall = threads_cpu(), time.process_time(), time.monotonic()
    asyncio.run(wait_all())
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    assert all(s.query() for s in streams)
    after = threads_cpu()
    busy = {{k: round(v - before.get(k, 0.0), 3) for k, v in after.items() if v - before.get(k, 0.0) >= 0.01}}
    rows[round_] = dict(wall_s=round(wall, 3), cpu_s=round(cpu, 4), cpu_ms_per_s=round(cpu / wall * 1e3, 2),
                        threads=busy)
print(json.dumps(rows))
"""


@pytest.mark.parametrize("n", [1, 16, 64, 200, 1000])
def test_awaiting_n_streams_costs_no_cpu_fresh_or_not(n):
    out = run_watched(SCRIPT.format(n=n))
    rows = json.loads(out.strip().splitlines()[-1])
    print(n, rows)
    for name, row in rows.items():
        assert row["cpu_ms_per_s"] < 20, f"{n} streams, {name}: {row}"
