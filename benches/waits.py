"""Waits beside the peers, once a GPU run (issue 38): from a kernel's end to the waiter running again, and the CPU that
1,000 pending awaits cost; and by the stream's sync_policy (issue 51): a 'spin' stream's synchronize() beside the
driver's own spinning wait, and the CPU a 'blocking' stream's waits cost per second waited. The kernel's end is seen by raw_driver.c's raw_watch spinning, on a C thread, on mapped host memory that the
kernel writes last; the waiter reads the same clock (CLOCK_MONOTONIC) when it runs again."""

import asyncio, ctypes, json, math, os, statistics, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor

import custream

KERNEL = r'''
extern "C" __global__ void sleep_then_flag(unsigned long long ns, volatile int *flag) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
    __threadfence_system();
    *flag = 1;
    __threadfence_system();
}'''
# A wait longer than the 20 ms a thread's wait polls for before it sleeps on a notifier (src/waits/for_gpu.rs), and a shorter.
LONG_NS, SHORT_NS, PENDING = 30_000_000, 5_000_000, 1_000
DRIVER, MAIN = "s.synchronize(), another thread (the driver's wait)", "s.synchronize(), the main thread (interruptible)"
AWAIT = "await s.record()"

def then(fn):  # fn(), then the clock (raw_watch's: CLOCK_MONOTONIC)
    return lambda: (fn(), time.monotonic_ns())[1]

async def after(awaitable) -> int:
    await awaitable
    return time.monotonic_ns()

def run(cfg: dict, gpu: bool, raw, floor=None) -> dict:
    if not gpu or raw is None:
        return {"na": "needs a GPU and raw_driver.c"}
    import cupy as cp
    cp.cuda.Device(0).use()
    host = cp.cuda.runtime.hostAlloc(4, 2)  # mapped; with unified addressing the device sees it at this address
    flag, kernel = ctypes.c_int.from_address(host), cp.RawKernel(KERNEL, "sleep_then_flag")
    sleep = lambda ns: kernel((1,), (1,), (cp.uint64(ns), cp.intp(host)))  # noqa: E731 (then raises the flag)
    s = custream.Stream(device=0)
    ext, loop, pool = cp.cuda.Stream.from_external(s), asyncio.new_event_loop(), ThreadPoolExecutor(1)
    samples = max(20, min(200, int(cfg["budget_s"] * 50)))

    def latency(wait, kernel_ns, on=ext) -> float:
        """Median ns from the end of a `kernel_ns` kernel on `on` (raw_watch, on a C thread that takes no GIL) to
        `wait` returning."""
        out = []
        for _ in range(samples if kernel_ns <= SHORT_NS else max(20, samples // 4)):  # 30 ms kernels: fewer
            flag.value = 0
            if raw.raw_watch_start(host, 5e9):
                raise RuntimeError("raw_watch_start: no thread")
            with on:
                sleep(kernel_ns)
            end = wait()
            out.append(end - raw.raw_watch_join())
        return statistics.median(out)
    waits = {DRIVER: lambda: pool.submit(then(s.synchronize)).result(), MAIN: then(s.synchronize),
             "s.synchronize(timeout=10)": then(lambda: s.synchronize(timeout=10)),
             AWAIT: lambda: loop.run_until_complete(after(s.record())),
             "await asyncio.to_thread(s.synchronize)":
                 lambda: loop.run_until_complete(after(asyncio.to_thread(s.synchronize))),
             "CuPy stream.synchronize()": then(ext.synchronize),
             "a host function runs (C: the floor of a wait that does not spin)": lambda: raw.raw_hostfn(s.handle)}
    out = {}
    for kernel_ns, names in ((LONG_NS, waits), (SHORT_NS, (DRIVER, MAIN, AWAIT))):
        ns = {name: latency(waits[name], kernel_ns) for name in names}
        label = f"{kernel_ns / 1e6:g} ms kernel"
        out.update({f"{name}, {label}": {"ns": v, "ratio": v / ns[DRIVER]} for name, v in ns.items()})
    out[f"{AWAIT}, 5 ms kernel"]["target"] = 1.5
    if hasattr(custream.Stream, "sync_policy"):  # a wheel from before the settings has no policy rows
        out.update(by_policy(latency, sleep, pool, cp))
    out.update(pending_cpu(loop, s, ext, sleep))
    out.update(fresh_process_cpu(FRESH))
    loop.close()
    pool.shutdown()
    s.close()
    cp.cuda.runtime.freeHost(host)
    return out

def by_policy(latency, sleep, pool, cp) -> dict:
    """A 'spin' stream's synchronize() on the main thread (custream's own wait, which then polls to the end) beside the
    driver's spinning wait (cuStreamSynchronize on another thread, the same stream); and the process's CPU per second
    that 1 s kernels are waited for on a 'blocking' stream (custream's wait, CuPy's), beside an 'auto' stream's."""
    spin = custream.Stream(device=0, sync_policy="spin")
    on = cp.cuda.Stream.from_external(spin)
    driver = latency(lambda: pool.submit(then(spin.synchronize)).result(), SHORT_NS, on)
    main = latency(then(spin.synchronize), SHORT_NS, on)
    out = {"s.synchronize(), a 'spin' stream, another thread (the driver's spinning wait), 5 ms kernel": {"ns": driver},
           "s.synchronize(), a 'spin' stream, the main thread, 5 ms kernel":
               {"ns": main, "ratio": main / driver, "target": 1.1}}
    spin.close()

    def cpu_per_second(policy, wait_of) -> float:
        """CPU ns the process spends per second of waiting for a 1 s kernel, over three waits."""
        s = custream.Stream(device=0, sync_policy=policy)
        ext, used, waited = cp.cuda.Stream.from_external(s), 0.0, 0.0
        with ext:
            sleep(1_000_000)
        s.synchronize()  # warm: custream's notifier made
        for _ in range(3):
            with ext:
                sleep(1_000_000_000)
            c, w = time.process_time(), time.monotonic()
            wait_of(s, ext)()
            used, waited = used + time.process_time() - c, waited + time.monotonic() - w
        s.close()
        return used / waited * 1e9
    out["CPU ms per second waited, a 'blocking' stream, s.synchronize()"] = {
        "ns": cpu_per_second("blocking", lambda s, ext: s.synchronize), "unit": "ms", "target_ms": 5}
    out["CPU ms per second waited, a 'blocking' stream, CuPy's synchronize()"] = {
        "ns": cpu_per_second("blocking", lambda s, ext: ext.synchronize), "unit": "ms", "target_ms": 5}
    out["CPU ms per second waited, an 'auto' stream, s.synchronize()"] = {
        "ns": cpu_per_second("auto", lambda s, ext: s.synchronize), "unit": "ms"}
    return out

def pending_cpu(loop, s, ext, sleep) -> dict:
    """CPU seconds (process time) spent in one second while PENDING waits are pending, each way."""
    async def used(wait) -> float:
        """CPU of one second with PENDING `wait(event)`s pending behind a 1.2 s kernel."""
        with ext:
            sleep(1_200_000_000)
        waits = [asyncio.ensure_future(wait(s.record())) for _ in range(PENDING)]
        await asyncio.sleep(0.1)
        t = time.process_time()
        await asyncio.sleep(1.0)
        cpu = time.process_time() - t
        # Only a second in which they were all pending counts (arming that blocked the loop would not show).
        cpu = cpu if not any(w.done() for w in waits) else math.nan
        await asyncio.gather(*waits)
        return cpu
    cpu = lambda wait: loop.run_until_complete(used(wait)) * 1e9  # noqa: E731
    return {f"CPU ms in 1 s with {PENDING:,} awaits pending": {"ns": cpu(after), "unit": "ms", "target_ms": 20},
            f"CPU ms in 1 s with {PENDING:,} asyncio.to_thread(e.synchronize) pending":
                {"ns": cpu(lambda e: asyncio.to_thread(e.synchronize)), "unit": "ms"}}

FRESH = 200
# A process of its own: FRESH custream streams, each behind a 1 s kernel (KERNEL, its flag unread), awaited together
# before custream made any notifier there but those its first stream's context got.
FRESH_SCRIPT = r"""
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[2])
import cupy, custream
from waits import KERNEL
n, flag = int(sys.argv[1]), cupy.cuda.runtime.hostAlloc(4, 2)
k, streams = cupy.RawKernel(KERNEL, "sleep_then_flag"), [custream.Stream(device=0) for _ in range(n)]
def sleep(s, ns):
    with cupy.cuda.Stream.from_external(s):
        k((1,), (1,), (cupy.uint64(ns), cupy.intp(flag)))
sleep(streams[0], 1000); streams[0].synchronize()
for s in streams:
    sleep(s, 1_000_000_000)
async def main():
    await asyncio.gather(*(s.record() for s in streams))
c, w = time.process_time(), time.monotonic()
asyncio.run(main())
print(json.dumps((time.process_time() - c) / (time.monotonic() - w)))
"""

def fresh_process_cpu(n) -> dict:
    """CPU per second waited by FRESH awaits in a fresh process (issue 52: making notifiers while the GPU is busy spun)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", FRESH_SCRIPT, str(n), here], capture_output=True, text=True, timeout=120)
    per_s = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else math.nan
    return {f"CPU ms per second waited, {n} streams' awaits in a fresh process": {"ns": per_s * 1e9, "unit": "ms", "target_ms": 20}}
