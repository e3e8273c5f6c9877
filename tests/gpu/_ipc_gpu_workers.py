"""The other process of tests/gpu/test_gpu_ipc.py and test_gpu_memops.py: started with torch's
spawn context (torch.multiprocessing), so CUDA tensors cross in CUDA IPC memory; each target
answers on the queue it is given. Kept short: every second here is a GPU machine's."""

import torch

import custream

SLEEP = 200_000_000  # torch.cuda._sleep cycles: ~0.1 s on an H100, long enough to lose a race


def spawn(target, *args):
    """A torch spawn-context process running `target` (a function of this module) with an
    inbox and an outbox: (process, inbox, outbox)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=globals()[target], args=(inbox, outbox, *args))
    p.start()
    return p, inbox, outbox


def finish(p):
    """Join `p`; a hang or a failure fails the test."""
    import pytest

    p.join(60)
    if p.is_alive():
        p.kill()
        pytest.fail("the other process hung")
    assert p.exitcode == 0, p.exitcode


def torch_stream(s):
    """A torch view of a custream stream."""
    get = getattr(torch.cuda, "get_stream_from_external", None)
    return get(s.handle) if get else torch.cuda.ExternalStream(s.handle)


def event_peer(inbox, outbox, t):
    """Both directions of an IPC event hand-off, the child's side (see the test)."""
    s = custream.Stream()
    ts = torch_stream(s)
    # 1. The parent's event: our copy must see what the parent wrote after its sleep.
    parents = inbox.get(timeout=60)  # a custream.Event, unpickled: opened from its handle
    s.wait(parents)
    with torch.cuda.stream(ts):
        t[1].copy_(t[0])
    s.synchronize()
    outbox.put(("copied", int(t[1].item()), repr(parents)))
    parents.close()
    # 2. Ours: the parent waits on it, after we sleep and then write.
    mine = custream.Event(ipc=True)
    with torch.cuda.stream(ts):
        torch.cuda._sleep(SLEEP)
        t[2].fill_(9)
    mine.record(s)
    outbox.put(mine)
    inbox.get(timeout=60)  # the parent is done with it: only now may it go
    mine.close()


def semaphore_peer(inbox, outbox, t, words):
    """Both directions of a semaphore in IPC memory (`words`: [released, answered]), the
    child's side: wait for the parent's release, copy, answer after a sleep and a write."""
    s = custream.Stream()
    ts = torch_stream(s)
    s.wait_value(words, 1, op="geq")  # the tensor's first element (__cuda_array_interface__)
    with torch.cuda.stream(ts):
        t[1].copy_(t[0])
        torch.cuda._sleep(SLEEP)
        t[2].fill_(9)
    s.write_value(words[1:], 1)
    s.synchronize()
    outbox.put(("done", int(t[1].item())))
    inbox.get(timeout=60)


def exporter(inbox, outbox, how):
    """Export an IPC event and send it; then, as `how` says: exit at once ("exit"), close the
    event and stay ("close"), or record a long sleep on it and exit before it ends ("busy")."""
    s = custream.Stream()
    e = custream.Event(ipc=True)
    if how == "busy":
        with torch.cuda.stream(torch_stream(s)):
            torch.cuda._sleep(SLEEP * 50)  # seconds: the exit comes first
        e.record(s)
    outbox.put(e.ipc_handle())
    if how == "close":
        inbox.get(timeout=60)
        e.close()
        outbox.put("closed")
        inbox.get(timeout=60)
    elif how == "busy":
        inbox.get(timeout=60)
        import os

        os._exit(0)  # no clean-up: as a crash would leave it
