"""Timing as `timeit` does it (the statement compiled into the loop body, gc off), with
`perf_counter_ns`, in loops sized to last about `target_ms`: the median over repeats of ns
per execution. Nothing is subtracted."""

import statistics, time, timeit

def timer(stmt: str, namespace: dict):
    """run(n) -> elapsed ns of n executions of `stmt` in `namespace` (its globals)."""
    return timeit.Timer(stmt, globals=namespace, timer=time.perf_counter_ns).timeit

def loop_size(run, target_ms: float, max_number: int = 2_000_000) -> int:
    """How many executions make `run(n)` last about `target_ms`; one untimed pass first,
    since first calls fill caches and may allocate."""
    run(1)
    number = 1
    while (elapsed := run(number)) < target_ms * 1e6 / 10 and number < max_number:
        number *= 10
    return int(min(max_number, max(1, target_ms * 1e6 / max(elapsed / number, 0.01))))

def in_turn(runs: list, repeats: int = 15, target_ms: float = 20.0, budget_s: float = 3.0) -> tuple[list, int]:
    """Per runner (run(n) -> elapsed ns) its samples, ns per execution: a repeat of each in
    turn, the one that goes first alternating; `budget_s` a runner caps the repeats (at least
    3). Also the first runner's loop size."""
    sizes, samples = [loop_size(run, target_ms) for run in runs], [[] for _ in runs]
    deadline = time.perf_counter() + len(runs) * budget_s
    while len(samples[0]) < repeats and (len(samples[0]) < 3 or time.perf_counter() < deadline):
        for i in range(len(runs))[::-1 if len(samples[0]) % 2 else 1]:
            samples[i].append(runs[i](sizes[i]) / sizes[i])
    return samples, sizes[0]

def measure(stmt: str, namespace: dict, **cfg) -> dict:
    """Median ns per execution of `stmt`, with its spread."""
    (s,), number = in_turn([timer(stmt, namespace)], **cfg)
    return {"ns": statistics.median(s), "min_ns": min(s), "max_ns": max(s), "repeats": len(s), "number": number,
            "stmt": stmt}

def paired(mine, theirs, **cfg) -> dict:
    """`mine` and `theirs` timed in turn. The figure is the median over pairs of their ratio:
    what moves the cost of the calls underneath both (the driver's state, the CPU's clock
    and caches) between pairs moves both figures of a pair alike."""
    (a, b), number = in_turn([mine, theirs], **cfg)
    ratios = [x / y for x, y in zip(a, b)]
    return {"ns": statistics.median(a), "raw_ns": statistics.median(b), "ratio": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "repeats": len(a), "number": number}
