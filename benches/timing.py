"""Timing as `timeit` does it, in loops of about `target_ms`: the median over repeats; nothing subtracted."""

import statistics, time, timeit

def timer(stmt: str, namespace: dict):  # run(n) -> the ns n executions take
    return timeit.Timer(stmt, globals=namespace, timer=time.perf_counter_ns).timeit

def batches(stmt: str, namespace: dict, sync, batch: int = 100):
    """timer(), with an untimed `sync()` every `batch` executions (the queue stays short), as the C loops do."""
    timed = timer(stmt, namespace)
    return lambda n: sum((timed(min(batch, n - done)), sync())[0] for done in range(0, n, batch))

def loop_size(run, target_ms: float, max_number: int = 2_000_000) -> int:
    run(1)
    number = 1
    while (elapsed := run(number)) < target_ms * 1e6 / 10 and number < max_number:
        number *= 10
    return int(min(max_number, max(1, target_ms * 1e6 / max(elapsed / number, 0.01))))

def medians_and_ratios(runs: list, repeats: int = 15, target_ms: float = 20.0, budget_s: float = 3.0):
    """Runners (run(n) -> ns) timed in turn, alternately first, `repeats` times (within `budget_s` each, at least 3):
    each one's median ns per execution, and ratio(i, j), the median over rounds of i's time over j's, which the CPU's
    drift spares."""
    sizes, samples = [loop_size(run, target_ms) for run in runs], [[] for _ in runs]
    deadline = time.perf_counter() + len(runs) * budget_s
    while len(samples[0]) < repeats and (len(samples[0]) < 3 or time.perf_counter() < deadline):
        for i in range(len(runs))[::-1 if len(samples[0]) % 2 else 1]:
            samples[i].append(runs[i](sizes[i]) / sizes[i])
    return ([statistics.median(s) for s in samples],
            lambda i, j: statistics.median(x / y for x, y in zip(samples[i], samples[j])))

def median_ns(stmt: str, namespace: dict, **cfg) -> float:
    return medians_and_ratios([timer(stmt, namespace)], **cfg)[0][0]
