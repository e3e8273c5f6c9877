"""Targets of the processes tests/test_event.py starts with multiprocessing (spawn and
forkserver import them by name, so they live in a module)."""

import custream


def importer(conn):
    """Open the IPC event sent over `conn` (pickled: the Event itself), use it, report."""
    event = conn.recv()
    s = custream.Stream()
    s.wait(event)
    event.record(s)
    done = event.query()
    event.synchronize()
    conn.send((repr(event), event.ipc, done, event.ipc_handle().pid))
    event.close()


def exporter(conn, linger):
    """Export an IPC event, send its handle, and exit once told to (or at once)."""
    event = custream.Event(ipc=True)
    conn.send(event.ipc_handle())
    if linger:
        conn.recv()
    event.close()
