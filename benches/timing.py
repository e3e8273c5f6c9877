"""Timing as `timeit` does it (the statement compiled into the loop body, gc off), with
`perf_counter_ns`, in loops sized to last about `target_ms`: the median over repeats of ns
per execution. Nothing is subtracted."""

import statistics
import time
import timeit


def timer(stmt: str, namespace: dict):
    """run(n) -> elapsed ns of n executions of `stmt` in `namespace` (its globals)."""
    return timeit.Timer(stmt, globals=namespace, timer=time.perf_counter_ns).timeit


def loop_size(run, target_ms: float, max_number: int = 2_000_000) -> int:
    """How many executions make `run(n)` (elapsed ns) last about `target_ms`; one untimed
    pass first, since first calls fill caches and may allocate."""
    run(1)
    number = 1
    while (elapsed := run(number)) < target_ms * 1e6 / 10 and number < max_number:
        number *= 10
    return int(min(max_number, max(1, target_ms * 1e6 / max(elapsed / number, 0.01))))


def measure(stmt: str, namespace: dict, *, repeats: int = 15, target_ms: float = 20.0, budget_s: float = 3.0) -> dict:
    """Median ns per execution of `stmt`, with its spread; `budget_s` caps the repeats (at least 3)."""
    run = timer(stmt, namespace)
    number = loop_size(run, target_ms)
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < repeats and (len(samples) < 3 or time.perf_counter() < deadline):
        samples.append(run(number) / number)
    return {"ns": statistics.median(samples), "min_ns": min(samples), "max_ns": max(samples),
            "repeats": len(samples), "number": number, "stmt": stmt}


def paired(mine, theirs, *, repeats: int = 15, target_ms: float = 20.0, budget_s: float = 3.0) -> dict:
    """`mine` and `theirs` (each: run(n) -> elapsed ns) timed in turn, one repeat of each,
    the one that goes first alternating. The figure is the median over pairs of their ratio:
    what moves the cost of the calls underneath both (the driver's state, the CPU's clock
    and caches) between pairs moves both figures of a pair alike."""
    n_mine, n_theirs = loop_size(mine, target_ms), loop_size(theirs, target_ms)
    a: list[float] = []
    b: list[float] = []
    deadline = time.perf_counter() + 2 * budget_s
    while len(a) < repeats and (len(a) < 3 or time.perf_counter() < deadline):
        turn = [(mine, n_mine, a), (theirs, n_theirs, b)]
        for run, n, samples in turn[::-1] if len(a) % 2 else turn:
            samples.append(run(n) / n)
    ratios = [x / y for x, y in zip(a, b)]
    return {"ns": statistics.median(a), "raw_ns": statistics.median(b), "ratio": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "repeats": len(a), "number": n_mine}
