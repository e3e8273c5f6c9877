"""Shared by the thread tests on the CPU and the GPU: run a function on many threads at
once, and wait for a condition another thread (or the stand-in driver) brings about."""

import dis
import linecache
import sys
import threading
import time

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


def wait_until(condition, what, timeout=10.0):
    """Return once ``condition()`` is true; fail naming ``what`` if it is not within
    ``timeout`` seconds. The test waits for the thing itself, not for a guess at its time."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"not within {timeout} s: {what}"
        time.sleep(0.001)  # a poll's interval


def blocked_at(thread, text):
    """Whether ``thread`` is inside the call of a source line holding ``text`` (a line of one
    call): its innermost Python frame is on that line at the call instruction, so the callee
    runs (a C function that blocks has let the GIL go there). Before the call it is not."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None or text not in linecache.getline(frame.f_code.co_filename, frame.f_lineno):
        return False
    here = [i.opname for i in dis.get_instructions(frame.f_code) if i.offset == frame.f_lasti]
    return bool(here) and here[0].startswith(("CALL", "PRECALL"))


def signal_when_blocked(thread, text, sig, also=lambda: True, what=""):
    """Send ``sig`` to this process once ``thread`` is inside the call on the line holding
    ``text`` (``blocked_at``) and ``also()`` holds (``what`` says what it waits for): a
    Ctrl-C that comes while a wait waits, not before it."""
    import os

    def send():
        wait_until(lambda: blocked_at(thread, text) and also(),
                   f"a call on the line holding {text!r} waits{what}")
        os.kill(os.getpid(), sig)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    return sender
