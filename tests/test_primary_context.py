"""custream's retains of a device's primary context and the default streams' rule for a
thread with no current context, on the CPU against the stand-in driver (tests/standin),
which counts retains, pushes and live streams. tests/gpu/ checks the same on a device."""

from standin import run, standin_lib  # noqa: F401  (a fixture)


def test_closing_the_last_stream_keeps_the_primary_context(standin_lib):
    run(standin_lib, """
        assert standin.standin_primary_retains() == 0
        s = custream.Stream()
        assert standin.standin_primary_retains() == 2  # the stream's, and the process's
        s.close()
        assert standin.standin_primary_retains() == 1, "closing the last stream released the context"
        for _ in range(100):
            custream.Stream().close()
        assert standin.standin_primary_retains() == 1 and standin.standin_live_streams() == 0
        custream._custream._finalize()  # what atexit runs
        assert standin.standin_primary_retains() == 0
    """)


def test_a_reset_by_another_library_leaves_new_streams_working(standin_lib):
    out = run(standin_lib, """
        old = custream.Stream()
        standin.standin_reset_primary()
        new = custream.Stream()
        new.synchronize()
        try:
            old.synchronize()
        except custream.CudaError as e:
            print(e.name)
        old.close(), new.close()
    """)
    assert out.split() == ["CUDA_ERROR_CONTEXT_IS_DESTROYED"]


def test_default_streams_without_a_current_context_use_device_0_for_the_call_only(standin_lib):
    run(standin_lib, """
        import threading
        get_current = standin.cuCtxGetCurrent
        def current():
            c = ctypes.c_void_p()
            get_current(ctypes.byref(c))
            return c.value
        def use_all():
            for s in (custream.DEFAULT_STREAM, custream.LEGACY_DEFAULT_STREAM, custream.PER_THREAD_DEFAULT_STREAM):
                before = standin.standin_pushes()
                s.synchronize()
                assert s.query() is True and s.device == 0
                assert standin.standin_pushes() > before  # device 0's primary context, pushed...
                assert current() is None  # ...and popped: nothing is left current
            ev = custream.DEFAULT_STREAM.record()
            custream.LEGACY_DEFAULT_STREAM.wait(ev)
            custream.PER_THREAD_DEFAULT_STREAM.wait(custream.DEFAULT_STREAM)
            ev.close()
        t = threading.Thread(target=use_all)
        t.start(); t.join()
        use_all()
        assert standin.standin_live_events() == 0
    """)
