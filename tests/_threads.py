"""Shared by the thread tests on the CPU and the GPU: run a function on many threads at once."""

import threading

THREADS = 16


def run_threads(target, n=THREADS):
    """Call ``target(k)`` for k in range(n), all threads released together by a barrier;
    fail with the first errors, each with its thread's index."""
    errors = []
    start = threading.Barrier(n)

    def body(k):
        try:
            start.wait()
            target(k)
        except BaseException as e:  # noqa: BLE001 - reported below with its thread
            errors.append((k, repr(e)))

    threads = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
