"""Waits beside the peers, once a GPU run (issues 38, 51): from a kernel's end, seen by raw_driver.c's raw_watch on a C
thread, to the waiter running again (both read CLOCK_MONOTONIC); the CPU 1,000 pending awaits cost; a 'spin' stream's
synchronize() beside the driver's spinning wait; the CPU per second waited on a 'blocking' stream."""

import asyncio, ctypes, math, os, statistics, subprocess, sys, time
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
# A wait longer than the 20 ms a thread's wait polls for before it sleeps on a notifier (src/waits/for_gpu.rs), and a
# shorter; the awaits pending at once; the streams awaited in a fresh process.
LONG_NS, SHORT_NS, PENDING, FRESH = 30_000_000, 5_000_000, 1_000, 200
DRIVER, MAIN = "s.synchronize(), another thread (the driver's wait)", "s.synchronize(), the main thread (interruptible)"
AWAIT, SPIN = "await s.record()", "s.synchronize(), a 'spin' stream, "
SPIN_DRIVER, SPIN_MAIN = SPIN + "another thread (the driver's spinning wait)", SPIN + "the main thread"

def then(fn):  # fn(), then the clock (raw_watch's: CLOCK_MONOTONIC)
    return lambda: (fn(), time.monotonic_ns())[1]

async def after(awaitable) -> int:
    await awaitable
    return time.monotonic_ns()

def on_gpu():
    """CuPy on device 0, 4 bytes of mapped host memory (with unified addressing the device sees them at this address),
    and sleep(ns, on): KERNEL on the CuPy stream `on`, raising that flag after `ns`."""
    import cupy as cp
    cp.cuda.Device(0).use()
    host, kernel = cp.cuda.runtime.hostAlloc(4, 2), cp.RawKernel(KERNEL, "sleep_then_flag")

    def sleep(ns: int, on) -> None:
        with on:
            kernel((1,), (1,), (cp.uint64(ns), cp.intp(host)))
    return cp, host, sleep

def run(cfg: dict, gpu: bool, raw, floor=None) -> dict:
    if not gpu or raw is None:
        return {"na": "needs a GPU and raw_driver.c"}
    cp, host, sleep = on_gpu()
    flag, s = ctypes.c_int.from_address(host), custream.Stream(device=0)
    ext, loop, pool = cp.cuda.Stream.from_external(s), asyncio.new_event_loop(), ThreadPoolExecutor(1)
    samples = max(20, min(200, int(cfg["budget_s"] * 50)))

    def latency(wait, kernel_ns, on) -> float:
        """Median ns from the end of a `kernel_ns` kernel on `on` (raw_watch, on a C thread that takes no GIL) to
        `wait` returning."""
        out = []
        for _ in range(samples if kernel_ns <= SHORT_NS else max(20, samples // 4)):  # 30 ms kernels: fewer
            flag.value = 0
            if raw.raw_watch_start(host, 5e9):
                raise RuntimeError("raw_watch_start: no thread")
            sleep(kernel_ns, on)
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

    def rows(kernel_ns: int, names: list, on) -> None:  # each wait's latency, and its ratio to the first's
        ns = {name: latency(waits[name], kernel_ns, on) for name in names}
        out.update({f"{name}, {kernel_ns / 1e6:g} ms kernel": {"ns": v, "ratio": v / ns[names[0]]}
                    for name, v in ns.items()})
    rows(LONG_NS, list(waits), ext)
    rows(SHORT_NS, [DRIVER, MAIN, AWAIT], ext)
    out[f"{AWAIT}, 5 ms kernel"]["target"] = 1.5
    if hasattr(custream.Stream, "sync_policy"):  # a wheel from before the settings has no policy rows
        # A 'spin' stream's synchronize() on the main thread (custream's own wait, which then polls to the end)
        # beside the driver's spinning wait (cuStreamSynchronize on another thread, the same stream).
        spin = custream.Stream(device=0, sync_policy="spin")
        waits.update({SPIN_DRIVER: lambda: pool.submit(then(spin.synchronize)).result(),
                      SPIN_MAIN: then(spin.synchronize)})
        rows(SHORT_NS, [SPIN_DRIVER, SPIN_MAIN], cp.cuda.Stream.from_external(spin))
        out[f"{SPIN_MAIN}, 5 ms kernel"]["target"] = 1.1
        spin.close()
        out.update(by_policy(sleep, cp))
    out.update(pending_cpu(loop, s, ext, sleep))
    p = subprocess.run([sys.executable, os.path.abspath(__file__), str(FRESH)], capture_output=True, text=True,
                       timeout=120)  # issue 52: making notifiers while the GPU is busy spun
    out[f"CPU ms per second waited, {FRESH} streams' awaits in a fresh process"] = {
        "ns": float(p.stdout.split()[-1]) if p.returncode == 0 else math.nan, "unit": "ms", "target_ms": 20}
    loop.close()
    pool.shutdown()
    s.close()
    cp.cuda.runtime.freeHost(host)
    return out

def cpu_per_second(start, wait, times: int = 1) -> float:
    """CPU ns the process spends per second of `wait()`, each of `times` after `start()` (untimed) queued kernels."""
    used = waited = 0.0
    for _ in range(times):
        start()
        c, w = time.process_time(), time.monotonic()
        wait()
        used, waited = used + time.process_time() - c, waited + time.monotonic() - w
    return used / waited * 1e9

def by_policy(sleep, cp) -> dict:
    """The CPU per second that 1 s kernels are waited for (three waits) on a 'blocking' stream (custream's wait,
    CuPy's), beside an 'auto' stream's."""
    out = {}
    for policy, which, target in (("blocking", "a 'blocking' stream, s.synchronize()", 5),
                                  ("blocking", "a 'blocking' stream, CuPy's synchronize()", 5),
                                  ("auto", "an 'auto' stream, s.synchronize()", None)):
        s = custream.Stream(device=0, sync_policy=policy)
        ext = cp.cuda.Stream.from_external(s)
        sleep(1_000_000, ext)
        s.synchronize()  # warm: custream's notifier made
        ns = cpu_per_second(lambda: sleep(1_000_000_000, ext), (ext if "CuPy" in which else s).synchronize, 3)
        s.close()
        out[f"CPU ms per second waited, {which}"] = {"ns": ns, "unit": "ms",
                                                     **({"target_ms": target} if target else {})}
    return out

def pending_cpu(loop, s, ext, sleep) -> dict:
    """CPU (process time) of one second with PENDING `wait(event)`s pending behind a 1.2 s kernel, each way."""
    async def used(wait) -> float:
        sleep(1_200_000_000, ext)
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

async def gather(awaitables) -> None:
    await asyncio.gather(*awaitables)

if __name__ == "__main__":  # run()'s fresh process: the CPU per second waited by FRESH streams' awaits, each stream
    # behind a 1 s kernel (its flag unread), awaited together before custream made any notifier but those its first
    # stream's context got
    cp, _, sleep = on_gpu()
    streams = [custream.Stream(device=0) for _ in range(int(sys.argv[1]))]
    sleep(1000, cp.cuda.Stream.from_external(streams[0]))
    streams[0].synchronize()
    print(cpu_per_second(lambda: [sleep(1_000_000_000, cp.cuda.Stream.from_external(st)) for st in streams],
                         lambda: asyncio.run(gather(st.record() for st in streams))))
