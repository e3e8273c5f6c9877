"""Awaiting many streams costs no CPU (issue 52): N streams, each behind a kernel, awaited
together with ``asyncio.gather``, in a fresh process (no notifier made yet, so any that the
waits need are made while the GPU is busy) and again in the same process (notifiers made).

Process CPU time over the wait's wall time must stay under 20 ms per second waited with 1 s
kernels, fresh and not; and the CPU must not grow with the wait: the same N awaits behind
0.3 s and behind 1 s kernels differ in CPU by under 20 ms per second of difference. What
remains is paid once per await, whatever the wait: arming it (``s.record()``, asyncio's task,
the notifier's driver calls) and completing it; the arming is printed per await (the CPU until
every task has run to its first suspension). Each N runs in a pytest process of its own
(marked ``isolated``, tests/conftest.py) under its watchdog; the CPU of each thread that used
any is printed, so a failure says where it went."""

import asyncio
import json
import os
import time

import pytest

from custream import Stream
from custream._custream import _notifier_streams
from custream_gpu_helpers import peer, sleep_on

pytestmark = pytest.mark.gpu

cupy = peer("cupy")

ISOLATED = pytest.mark.isolated(timeout=150)


def threads_cpu():
    """The CPU seconds (user and system) of each thread of this process, by "name/tid"."""
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except FileNotFoundError:  # a thread that ended since the listing
            continue
        out[f"{name}/{tid}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


async def wait_all(streams):
    """Await a record of each stream together; the process CPU time once every await is armed."""
    waits = [asyncio.ensure_future(s.record()) for s in streams]
    await asyncio.sleep(0)  # every task ran its first step (the ready queue is in order): armed
    armed = time.process_time()
    await asyncio.gather(*waits)
    return armed


# A fresh process is the point: its first awaits find no notifier made. Each N is a pytest
# process of its own (isolated), and nothing there before the test makes a stream or awaits
# (the conftests ask only for the device count; this module imports CuPy, which makes no
# context): the child must not have made notifiers before, which the test checks first.
@ISOLATED
@pytest.mark.parametrize("n", [1, 16, 64, 200, 1000])
def test_awaiting_n_streams_costs_no_cpu_fresh_or_not(n):
    assert _notifier_streams() == 0, "this process made notifiers before the test: its first awaits are not fresh"
    cupy.cuda.Device(0).use()
    streams = [Stream(device=0) for _ in range(n)]
    sleep_on(streams[0], 0.001)  # CuPy compiles and loads the kernel before any clock starts
    streams[0].synchronize()

    rows = {}
    for round_, seconds in (("fresh, 1 s", 1.0), ("notifiers made, 1 s", 1.0), ("notifiers made, 0.3 s", 0.3)):
        for s in streams:
            sleep_on(s, seconds)
        before, cpu, wall = threads_cpu(), time.process_time(), time.monotonic()
        armed = asyncio.run(wait_all(streams))
        wall, arm, cpu = time.monotonic() - wall, armed - cpu, time.process_time() - cpu
        assert all(s.query() for s in streams)
        after = threads_cpu()
        busy = {k: round(v - before.get(k, 0.0), 3) for k, v in after.items() if v - before.get(k, 0.0) >= 0.01}
        rows[round_] = dict(wall_s=round(wall, 3), cpu_s=round(cpu, 4), cpu_ms_per_s=round(cpu / wall * 1e3, 2),
                            arm_us_per_await=round(arm / n * 1e6, 1), threads=busy)
    print(json.dumps(rows))

    long, short = rows["notifiers made, 1 s"], rows["notifiers made, 0.3 s"]
    growth = (long["cpu_s"] - short["cpu_s"]) / (long["wall_s"] - short["wall_s"]) * 1e3
    print(n, rows, f"CPU per second of a longer wait: {growth:.2f} ms")
    for name in ("fresh, 1 s", "notifiers made, 1 s"):
        assert rows[name]["cpu_ms_per_s"] < 20, f"{n} streams, {name}: {rows}"
    assert growth < 20, f"{n} streams: the CPU grew {growth:.1f} ms per second of a longer wait: {rows}"
