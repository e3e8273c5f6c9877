"""asyncio's side of ``await event`` (``Event.__await__``): one bell per event loop; and the
watch over ``Event.future()``'s futures for a fault.

The driver's thread never enters Python. A host function queued behind the awaited event
(src/waits/for_gpu.rs) puts the await's token in the loop's bell and writes the bell's eventfd, which
the loop watches with ``add_reader``; the loop then runs ``_Ring.__call__`` here, which
completes the futures whose tokens rang. A cancelled await forgets its token at once; the
host function, already queued in the driver, still runs when the GPU passes the event, and
finds nothing to complete.
"""

import asyncio
import concurrent.futures
import functools
import itertools
import os
import threading
import time
import weakref

from custream._custream import CudaError, Event, _Bell

# How often pending awaits ask the driver whether their context died (a sticky fault).
CHECK_S = 1.0

# Loops that cannot be weakly referenced keep their bell (and stay alive) in _strong.
_bells: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Ring]" = weakref.WeakKeyDictionary()
_strong: "dict[asyncio.AbstractEventLoop, _Ring]" = {}
_tokens = itertools.count(1)


class _Ring:
    """A loop's bell and the futures waiting on it (with their events), by token; called by the
    loop when the bell's eventfd is readable."""

    __slots__ = ("bell", "futures", "checking")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.bell = _Bell()
        self.futures: "dict[int, tuple[asyncio.Future[None], Event]]" = {}
        self.checking = False
        loop.add_reader(self.bell.fileno(), self)

    def __call__(self) -> None:
        for token in self.bell.take():
            future, _ = self.futures.pop(token, (None, None))
            if future is not None and not future.done():
                future.set_result(None)

    def forget_future(self, token: int, future: "asyncio.Future[None]") -> None:
        """The future's done callback: a cancelled await forgets its token."""
        self.futures.pop(token, None)

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """While awaits are pending, ask the driver about their events every CHECK_S: after a
        sticky fault the driver runs no host function, and the awaits end with its error; an
        event reached without its ring (a notifier custream could not queue) ends its await."""
        if not self.checking:
            self.checking = True
            loop.call_later(CHECK_S, self.check, loop)

    def check(self, loop: asyncio.AbstractEventLoop) -> None:
        self.checking = False
        for token, (future, event) in list(self.futures.items()):
            try:
                reached = event.query()
            except CudaError as e:
                self.futures.pop(token, None)
                if not future.done():
                    future.set_exception(e)
            except ValueError:
                pass  # closed meanwhile: the notifier still rings
            else:
                if reached:  # a notifier that could not be queued (a failed driver call) never rings
                    self.futures.pop(token, None)
                    if not future.done():
                        future.set_result(None)
        if self.futures and not loop.is_closed():
            self.watch(loop)


def _ring_of(loop: asyncio.AbstractEventLoop) -> _Ring:
    try:
        ring = _bells.get(loop)
    except TypeError:
        ring = _strong.get(loop)
    if ring is None:
        ring = _Ring(loop)
        try:
            _bells[loop] = ring
        except TypeError:
            _strong[loop] = ring
    return ring


def prepare(event: Event) -> "tuple[_Bell, asyncio.Future[None], int]":
    """For ``Event.__await__``: the running loop's bell, a new future of that loop and the
    token the bell will ring for it."""
    loop = asyncio.get_running_loop()
    ring = _ring_of(loop)
    future: "asyncio.Future[None]" = loop.create_future()
    token = next(_tokens)
    ring.futures[token] = (future, event)
    ring.watch(loop)
    future.add_done_callback(functools.partial(ring.forget_future, token))
    return ring.bell, future, token


def pending_futures() -> int:
    """Futures of all loops still waiting on their bells (for tests)."""
    rings = list(_bells.values()) + list(_strong.values())
    return sum(len(r.futures) for r in rings)


# Event.future()'s futures still pending, with their events, and the thread that watches them
# (one, only while there are any).
_watched: "dict[concurrent.futures.Future[None], Event]" = {}
_watch_lock = threading.Lock()
_watcher: "threading.Thread | None" = None


def watch_future(future: "concurrent.futures.Future[None]", event: Event) -> None:
    """For ``Event.future()``: while the future is pending, ask the driver about its event every
    CHECK_S, so that a sticky fault (after which the driver runs no host function) fails it
    with the driver's error instead of leaving it pending for ever, and an event reached
    without its notifier ringing completes it."""
    global _watcher
    with _watch_lock:
        _watched[future] = event
        if _watcher is None:
            _watcher = threading.Thread(target=_watch, name="custream-future-watch", daemon=True)
            _watcher.start()
    future.add_done_callback(_unwatch)


def _unwatch(future: "concurrent.futures.Future[None]") -> None:
    with _watch_lock:
        _watched.pop(future, None)


def _watch() -> None:
    global _watcher
    while True:
        time.sleep(CHECK_S)
        with _watch_lock:
            if not _watched:
                _watcher = None
                return
            pending = list(_watched.items())
        for future, event in pending:
            try:
                reached = event.query()
            except CudaError as e:
                _unwatch(future)
                _settle(future, e)
            except ValueError:
                pass  # closed meanwhile: the notifier still rings
            else:
                if reached:  # a notifier that could not be queued never rings
                    _unwatch(future)
                    _settle(future, None)


def _settle(future: "concurrent.futures.Future[None]", error: "CudaError | None") -> None:
    try:
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
    except concurrent.futures.InvalidStateError:
        pass  # completed or cancelled meanwhile


def _after_fork_in_child() -> None:
    global _watcher
    _watched.clear()
    _watcher = None


os.register_at_fork(after_in_child=_after_fork_in_child)
