"""Waits beside the peers, once a GPU run (issue 38): from a kernel's end to the waiter running again, and the CPU that
1,000 pending awaits cost. The kernel's end is seen by raw_driver.c's raw_watch spinning on mapped host memory that the
kernel writes last; the waiter reads the same clock (CLOCK_MONOTONIC) when it runs again."""

import asyncio, ctypes, math, statistics, threading, time

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
# A wait longer than the 2 ms a thread's wait polls for before it sleeps on a notifier (src/waits.rs), and a shorter.
LONG_NS, SHORT_NS, PENDING = 5_000_000, 500_000, 1_000

def run(cfg: dict, gpu: bool, raw, floor=None) -> dict:
    if not gpu or raw is None:
        return {"na": "needs a GPU and raw_driver.c"}
    import cupy as cp
    cp.cuda.Device(0).use()
    watch, hostfn = raw.raw_watch, raw.raw_hostfn
    watch.restype, watch.argtypes = ctypes.c_double, [ctypes.c_void_p, ctypes.c_double]
    hostfn.restype, hostfn.argtypes = ctypes.c_double, [ctypes.c_void_p]
    host = cp.cuda.runtime.hostAlloc(4, 2)  # cudaHostAllocMapped
    flag = ctypes.c_int.from_address(host)
    dev = host  # mapped, with unified addressing: the device sees it at the host address
    kernel = cp.RawKernel(KERNEL, "sleep_then_flag")
    s = custream.Stream(device=0)
    ext = cp.cuda.Stream.from_external(s)
    samples = max(20, min(200, int(cfg["budget_s"] * 50)))

    def latency(wait, kernel_ns=LONG_NS) -> float:
        """Median ns from the end of a `kernel_ns` kernel to `wait` (which waits for it) returning."""
        out = []
        for _ in range(samples):
            flag.value = 0
            seen: list = []
            t = threading.Thread(target=lambda: seen.append(watch(host, 5e9)))
            t.start()
            with ext:
                kernel((1,), (1,), (cp.uint64(kernel_ns), cp.intp(dev)))
            back = wait()
            t.join()
            out.append(back - seen[0])
        return statistics.median(out)

    def on_thread(fn):
        box: list = []
        th = threading.Thread(target=lambda: (fn(), box.append(time.monotonic_ns())))
        th.start(); th.join()
        return box[0]

    loop = asyncio.new_event_loop()
    async def awaited():
        await s.record()
        return time.monotonic_ns()
    async def to_thread():
        await asyncio.to_thread(s.synchronize)
        return time.monotonic_ns()
    driver = lambda: on_thread(s.synchronize)  # noqa: E731
    main = lambda: (s.synchronize(), time.monotonic_ns())[1]  # noqa: E731
    aw = lambda: loop.run_until_complete(awaited())  # noqa: E731
    rows = {
        "s.synchronize(), another thread (the driver's wait)": latency(driver),
        "s.synchronize(), the main thread (interruptible)": latency(main),
        "s.synchronize(timeout=10)": latency(lambda: (s.synchronize(timeout=10), time.monotonic_ns())[1]),
        "await s.record()": latency(aw),
        "await asyncio.to_thread(s.synchronize)": latency(lambda: loop.run_until_complete(to_thread())),
        "CuPy stream.synchronize()": latency(lambda: (ext.synchronize(), time.monotonic_ns())[1]),
        "a host function runs (C: the floor of a wait that does not spin)": latency(lambda: hostfn(s.handle)),
    }
    base = rows["s.synchronize(), another thread (the driver's wait)"]
    out = {f"{name}, 5 ms kernel": {"ns": ns, "ratio": ns / base} for name, ns in rows.items()}
    out["await s.record(), 5 ms kernel"]["target"] = 1.5
    short = {name: latency(wait, SHORT_NS) for name, wait in
             [("s.synchronize(), another thread (the driver's wait)", driver),
              ("s.synchronize(), the main thread (interruptible)", main), ("await s.record()", aw)]}
    base = short["s.synchronize(), another thread (the driver's wait)"]
    out.update({f"{name}, 0.5 ms kernel": {"ns": ns, "ratio": ns / base} for name, ns in short.items()})
    out.update(pending_cpu(loop, s, ext, kernel, dev))
    loop.close()
    s.close()
    cp.cuda.runtime.freeHost(host)
    return out

def pending_cpu(loop, s, ext, kernel, dev) -> dict:
    """CPU seconds (process time) spent in one second while PENDING waits are pending, each way."""
    import cupy as cp

    async def used(wait) -> float:
        """CPU of one second with PENDING `wait(event)`s pending behind a 1.2 s kernel."""
        with ext:
            kernel((1,), (1,), (cp.uint64(1_200_000_000), cp.intp(dev)))
        waits = [asyncio.ensure_future(wait(s.record())) for _ in range(PENDING)]
        await asyncio.sleep(0.1)
        t = time.process_time()
        await asyncio.sleep(1.0)
        cpu = time.process_time() - t
        # Only a second in which they were all pending counts (arming that blocked the loop would not show).
        cpu = cpu if not any(w.done() for w in waits) else math.nan
        await asyncio.gather(*waits)
        return cpu

    async def awaited(e):
        await e
    cpu = lambda wait: loop.run_until_complete(used(wait)) * 1e9  # noqa: E731
    return {f"CPU ms in 1 s with {PENDING:,} awaits pending": {"ns": cpu(awaited), "unit": "ms", "target_ms": 20},
            f"CPU ms in 1 s with {PENDING:,} asyncio.to_thread(e.synchronize) pending":
                {"ns": cpu(lambda e: asyncio.to_thread(e.synchronize)), "unit": "ms"}}
