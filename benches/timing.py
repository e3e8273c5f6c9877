"""Timing primitives shared by every benchmark worker.

A statement is timed the way `timeit` does it (compiled into the loop body, no function
call around it, gc off), with `time.perf_counter_ns`; each repeat times a loop of N
executions, N chosen so that one repeat lasts about `target_ms`. The figure reported is the
median over repeats of ns per execution. Nothing is subtracted: the empty loop is timed too
and printed beside the results.
"""

from __future__ import annotations

import statistics
import time
import timeit


def _per_call(timer: timeit.Timer, number: int) -> float:
    return timer.timeit(number) / number


def measure(stmt: str, namespace: dict, *, repeats: int = 15, target_ms: float = 20.0,
            max_number: int = 2_000_000, budget_s: float = 3.0) -> dict:
    """Median ns per execution of `stmt` in `namespace` (globals), with its spread.

    `budget_s` caps the whole measurement: slow statements get fewer repeats (at least 3).
    """
    timer = timeit.Timer(stmt, globals=namespace, timer=time.perf_counter_ns)
    number = loop_size(timer.timeit, target_ms, max_number)
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < repeats and (len(samples) < 3 or time.perf_counter() < deadline):
        samples.append(_per_call(timer, number))
    return {
        "ns": statistics.median(samples),
        "min_ns": min(samples),
        "max_ns": max(samples),
        "repeats": len(samples),
        "number": number,
        "stmt": stmt,
    }


def paired(mine, theirs, *, repeats: int = 15, target_ms: float = 20.0, budget_s: float = 3.0, **_) -> dict:
    """`mine` and `theirs` (each: run(n) -> elapsed ns) timed in turn, one repeat of each,
    the one that goes first alternating. The figure is the median over pairs of their ratio:
    what moves the cost of the calls underneath both (the driver's state, the CPU's clock
    and caches) between pairs moves both figures of a pair alike."""
    n_mine, n_theirs = loop_size(mine, target_ms), loop_size(theirs, target_ms)
    a: list[float] = []
    b: list[float] = []
    deadline = time.perf_counter() + 2 * budget_s
    while len(a) < repeats and (len(a) < 3 or time.perf_counter() < deadline):
        if len(a) % 2:
            b.append(theirs(n_theirs) / n_theirs)
            a.append(mine(n_mine) / n_mine)
        else:
            a.append(mine(n_mine) / n_mine)
            b.append(theirs(n_theirs) / n_theirs)
    ratios = [x / y for x, y in zip(a, b)]
    return {"ns": statistics.median(a), "raw_ns": statistics.median(b), "ratio": statistics.median(ratios),
            "diff_ns": statistics.median([x - y for x, y in zip(a, b)]),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "repeats": len(a), "number": n_mine}


def loop_size(run, target_ms: float, max_number: int = 2_000_000) -> int:
    """How many executions make one repeat last about `target_ms`; `run(n)` times n of them
    and returns the elapsed ns. One untimed pass first: first calls fill caches and may
    allocate (lazy init, imports)."""
    run(1)
    number = 1
    while True:
        elapsed = run(number)
        if elapsed >= target_ms * 1e6 / 10 or number >= max_number:
            break
        number *= 10
    per_call = max(elapsed / number, 0.01)
    return int(min(max_number, max(1, target_ms * 1e6 / per_call)))


def empty_loop(namespace: dict | None = None, **kw) -> dict:
    """The cost of the loop itself (`pass`), the floor under every Python-level figure."""
    return measure("pass", namespace or {}, **kw)
