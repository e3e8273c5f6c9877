"""asyncio's side of ``await event`` (``Event.__await__``): one bell per event loop; and the
watch over ``Event.future()``'s futures for a fault.

The driver's thread never enters Python. A host function queued behind the awaited event
(src/waits/for_gpu.rs) puts the await's token in the loop's bell and writes the bell's eventfd, which
the loop watches with ``add_reader``; the loop then runs ``_Ring.__call__`` here, which
completes the futures whose tokens rang. A cancelled await forgets its token at once; the
host function, already queued in the driver, still runs when the GPU passes the event, and
finds nothing to complete.

Once a second while awaits are pending the loop asks the driver about one event per context
(a sticky fault fails every call in its context: that one answer ends all its awaits) and
about each orphaned await's event (one whose wait custream abandoned: nothing will ring for
it), so a pending await costs no CPU however many there are.
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

TYPE_CHECKING = False  # without importing typing at run time (the import stays cheap)
if TYPE_CHECKING:
    from collections.abc import Sequence, Set
    from typing import TypeVar

    _Key = TypeVar("_Key")

# How often pending awaits ask the driver whether their context died (a sticky fault).
CHECK_S = 1.0

# Loops that cannot be weakly referenced keep their bell (and stay alive) in _strong.
_bells: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Ring]" = weakref.WeakKeyDictionary()
_strong: "dict[asyncio.AbstractEventLoop, _Ring]" = {}
_tokens = itertools.count(1)


class _Ring:
    """A loop's bell and the futures waiting on it (with their events and contexts), by token;
    called by the loop when the bell's eventfd is readable."""

    __slots__ = ("bell", "futures", "orphans", "checking")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.bell = _Bell()
        self.futures: "dict[int, tuple[asyncio.Future[None], Event, int]]" = {}
        self.orphans: "set[int]" = set()
        self.checking = False
        loop.add_reader(self.bell.fileno(), self)

    def __call__(self) -> None:
        for token in self.bell.take():
            if token & _Bell.ORPHANED:
                self.orphans.add(token ^ _Bell.ORPHANED)  # nothing will ring for it: `check` asks
                continue
            self.end(token, None)

    def end(self, token: int, error: "CudaError | None") -> None:
        """The await of `token` is over: its future completes (or fails with `error`)."""
        future, _, _ = self.futures.pop(token, (None, None, None))
        self.orphans.discard(token)
        if future is not None and not future.done():
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

    def forget_future(self, token: int, future: "asyncio.Future[None]") -> None:
        """The future's done callback: a cancelled await forgets its token."""
        self.futures.pop(token, None)
        self.orphans.discard(token)

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """While awaits are pending, ask the driver every CHECK_S: after a sticky fault it runs
        no host function, and the awaits end with its error; an orphaned await whose event is
        reached ends."""
        if not self.checking:
            self.checking = True
            loop.call_later(CHECK_S, self.check, loop)

    def check(self, loop: asyncio.AbstractEventLoop) -> None:
        self.checking = False
        pending = [(token, event, context) for token, (_, event, context) in self.futures.items()]
        reached, failed = _ask(pending, self.orphans)
        for token in reached:  # early for a ringing await (its token then finds nothing); an orphan's end
            self.end(token, None)
        for token, _, context in pending:
            if context in failed:
                self.end(token, failed[context])
        if self.futures and not loop.is_closed():
            self.watch(loop)


def _ask(pending: "Sequence[tuple[_Key, Event, int]]", orphans: "Set[_Key]") -> "tuple[list[_Key], dict[int, CudaError]]":
    """What the once-a-second checks ask of the driver about pending waits, each a (key, event,
    context id): one event per context (a sticky fault fails every call in its context: that
    answer stands for all its waits) and each orphan's (a wait custream abandoned: nothing else
    will end it). The keys whose event was reached, and each failed context's error."""
    asked: "set[int]" = set()  # contexts an answer came from
    reached: "list[_Key]" = []
    failed: "dict[int, CudaError]" = {}
    for key, event, context in pending:
        if context in failed or (context in asked and key not in orphans):
            continue
        try:
            done = event.query()
        except CudaError as e:
            failed[context] = e
            continue
        except ValueError:
            continue  # closed meanwhile: its notifier still rings; another event answers
        asked.add(context)
        if done:
            reached.append(key)
    return reached, failed


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


def prepare(event: Event, context: int) -> "tuple[_Bell, asyncio.Future[None], int]":
    """For ``Event.__await__`` of an event of the context whose id is `context`: the running
    loop's bell, a new future of that loop and the token the bell will ring for it."""
    loop = asyncio.get_running_loop()
    ring = _ring_of(loop)
    future: "asyncio.Future[None]" = loop.create_future()
    token = next(_tokens)
    ring.futures[token] = (future, event, context)
    ring.watch(loop)
    future.add_done_callback(functools.partial(ring.forget_future, token))
    return ring.bell, future, token


def pending_futures() -> int:
    """Futures of all loops still waiting on their bells (for tests)."""
    rings = list(_bells.values()) + list(_strong.values())
    return sum(len(r.futures) for r in rings)


# Event.future()'s futures still pending, with their events and contexts; those whose wait
# custream abandoned (nothing will complete them but the watch's question); and the thread that
# watches them (one, only while there are any).
_watched: "dict[concurrent.futures.Future[None], tuple[Event, int]]" = {}
_orphans: "set[concurrent.futures.Future[None]]" = set()
_watch_lock = threading.Lock()
_watcher: "threading.Thread | None" = None


def watch_future(future: "concurrent.futures.Future[None]", event: Event, context: int) -> None:
    """For ``Event.future()`` of an event of the context whose id is `context`: while the
    future is pending, ask the driver every CHECK_S about one event of its context, so that a
    sticky fault (after which the driver runs no host function) fails it with the driver's
    error instead of leaving it pending for ever."""
    global _watcher
    with _watch_lock:
        _watched[future] = (event, context)
        if _watcher is None:
            _watcher = threading.Thread(target=_watch, name="custream-future-watch", daemon=True)
            _watcher.start()
    future.add_done_callback(_unwatch)


def orphaned_future(future: "concurrent.futures.Future[None]") -> None:
    """Called by custream (its host thread) when the wait behind `future` was abandoned: no
    host function will complete it, so the watch asks the driver about its own event. It may
    come before ``watch_future`` registers the future (the GIL changes hands in between)."""
    with _watch_lock:
        if not future.done():
            _orphans.add(future)


def _unwatch(future: "concurrent.futures.Future[None]") -> None:
    with _watch_lock:
        _watched.pop(future, None)
        _orphans.discard(future)


def _watch() -> None:
    global _watcher
    while True:
        time.sleep(CHECK_S)
        with _watch_lock:
            if not _watched:
                _watcher = None
                return
        check_futures()


def check_futures() -> None:
    """What the watch does once a second (`_ask`): an orphan whose event was reached completes;
    a failed context's futures fail with its error."""
    with _watch_lock:
        pending = [(future, event, context) for future, (event, context) in _watched.items()]
        _orphans.difference_update([f for f in _orphans if f.done()])
        orphans = set(_orphans)
    reached, failed = _ask(pending, orphans)
    for future in reached:
        if future in orphans:  # a ringing future's notifier completes it
            _unwatch(future)
            _settle(future, None)
    for future, _, context in pending:
        if context in failed:
            _unwatch(future)
            _settle(future, failed[context])


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
    _orphans.clear()
    _watcher = None


os.register_at_fork(after_in_child=_after_fork_in_child)
