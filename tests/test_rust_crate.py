"""pyo3-custream, the Rust face (docs/rust.md), through its test extension tests/rust_ext
(`custream_rust_ext`, built by scripts/build/build-rust-ext.sh): every item of the crate from
Python, on the CPU. Streams are wrapped made-up handles (no driver call), or owned streams of
the stand-in libcuda (tests/standin), each such test in a pytest process of its own
(tests/conftest.py); fork, interpreter exit and a missing or incompatible custream run in
fresh interpreters.

An installed extension is used (CI installs the wheel scripts/build/build-rust-ext.sh builds);
otherwise the first test builds it with cargo and maturin (tests/_rust_ext.py), and without
those the tests skip saying why, or fail under CUSTREAM_REQUIRE_BUILD_TOOLS. The Rust guide
(docs/rust.md) is checked to be the crate's own docs, and its recipe is built as a user would.
tests/gpu/test_gpu_rust.py has the GPU half (cudarc kernels on CuPy and PyTorch streams).
"""

import ctypes
import gc
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import warnings
import weakref
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import custream
from custream import Stream

import _capi_ctypes
from _rust_ext import load_ext
from producers import Producer, Raising, protocol_oracle

ROOT = Path(__file__).resolve().parent.parent
CRATE = ROOT / "pyo3-custream"
H = 0x7F3A2C001230
ACCEPTED = r"expected a custream\.Stream or an object with a __cuda_stream__\(\) method"


@pytest.fixture
def rx():
    ext = load_ext()
    ext.reset()
    yield ext
    gc.collect()


def run(code, **env):
    """`code` in a fresh interpreter (tests/ on its path); (returncode, stdout, stderr)."""
    load_ext()  # skip (or fail) here, not with a confusing subprocess error
    full = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]), **env)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full, timeout=120)
    return p.returncode, p.stdout, p.stderr


def run_ok(code, **env):
    rc, out, err = run(code, **env)
    assert rc == 0, out + err
    return out, err


class Owner:
    pass


# ---- StreamRef ----------------------------------------------------------------------------


def test_stream_ref_reads_a_custream_stream(rx):
    s = Stream.from_handle(H)
    assert rx.handle_of(s) == H
    assert not rx.is_default(s)
    for token in (custream.DEFAULT_STREAM, custream.LEGACY_DEFAULT_STREAM, custream.PER_THREAD_DEFAULT_STREAM):
        assert rx.is_default(token) and rx.handle_of(token) == token.handle
    assert rx.raw_round_trip(H) == H
    assert rx.cu_stream_of(s) == H  # StreamRef -> cudarc's CUstream -> StreamRef


def test_stream_ref_reads_a_protocol_object_and_leaves_nothing_behind(rx):
    p = Producer((0, H))
    before = custream.live_stream_count()
    assert rx.handle_of(p) == H and p.calls == 1  # one __cuda_stream__() call
    gc.collect()
    assert custream.live_stream_count() == before  # the wrapper went with the call
    # Another library's stream as custream.as_stream would see it: the handle it gives.
    assert rx.handle_of(Producer((0, 2))) == 2 and rx.is_default(Producer((0, 0)))


def test_a_closed_stream_is_a_value_error(rx):
    s = Stream.from_handle(H)
    s.close()
    with pytest.raises(ValueError, match="handle on a closed custream.Stream"):
        rx.handle_of(s)
    closed_inside = Producer((0, H))
    w = custream.as_stream(closed_inside)
    w.close()
    assert rx.handle_of(closed_inside) == H  # the producer is not closed: a fresh wrapper


@pytest.mark.parametrize("obj", [42, "stream", None, 1.5, object(), b"\x00" * 8, [0, H]])
def test_anything_else_is_a_type_error_naming_what_is_accepted(rx, obj):
    name = type(obj).__name__
    for f in (rx.handle_of, rx.take, rx.info):
        with pytest.raises(TypeError, match=ACCEPTED + r" \(a CuPy, PyTorch, cuda\.core, numba-cuda or rmm stream\), got " + re.escape(name)):
            f(obj)


def custream_error(obj):
    try:
        custream.as_stream(obj)
    except BaseException as e:  # noqa: BLE001 - the oracle
        return e
    return None


@pytest.mark.parametrize(
    "producer",
    [
        Producer((1, H)),  # version 1
        Producer("nope"),  # not a tuple
        Producer((0,)),  # one item
        Producer((0, H, 0)),
        Producer((0, -1)),  # a negative handle
        Producer((0, 2**64)),
        Producer((0, "0x1234")),
        Producer((0.0, H)),  # a float version
        Producer((False, H)),  # a bool version
        Raising(RuntimeError("the producer failed")),
        Raising(KeyboardInterrupt()),
    ],
    ids=lambda p: repr(getattr(p, "result", None) or getattr(p, "exc", None)),
)
def test_a_producer_that_lies_gets_custreams_own_error(rx, producer):
    """One parser: the crate hands protocol objects to custream's as_stream, so a lying
    producer gets exactly the error custream.as_stream raises for it (an exception raised by
    the producer itself propagates unchanged)."""
    expected = custream_error(producer)
    assert expected is not None
    for f in (rx.handle_of, rx.take):
        with pytest.raises(type(expected)) as got:
            f(producer)
        assert str(got.value) == str(expected)


@settings(max_examples=150, deadline=None)
@given(st.one_of(
    st.tuples(st.integers(-2, 2), st.integers(-5, 2**64 + 5)),
    st.tuples(st.just(0), st.one_of(st.text(max_size=3), st.floats(), st.none())),
    st.lists(st.integers(0, 2**64 - 1), max_size=3).map(tuple),
    st.integers(),
))
def test_stream_ref_agrees_with_the_protocol_oracle(result):
    rx = load_ext()
    want = protocol_oracle(result)
    if isinstance(want, type):
        with pytest.raises(want):
            rx.handle_of(Producer(result))
    else:
        assert rx.handle_of(Producer(result)) == want


# ---- Stream ---------------------------------------------------------------------------------


def test_stream_round_trips(rx):
    s = Stream.from_handle(H)
    assert rx.take(s) is s  # FromPyObject, then IntoPyObject: the same object
    assert rx.info(s) == (H, None, False)
    assert rx.from_bound(s) is s

    p = Producer((0, H))
    w = rx.take(p)  # as_stream: a Stream borrowing p's handle and keeping p
    assert type(w) is Stream and w.handle == H and w.owner is p and not w.owned

    owner = Owner()
    gone = weakref.ref(owner)
    made = rx.from_handle(H + 16, 3, owner)
    assert made.handle == H + 16 and made.device == 3 and made.owner is owner
    assert rx.info(made) == (H + 16, 3, False)
    del owner
    gc.collect()
    assert gone() is not None  # the Stream holds its owner
    assert rx.close(made) is True and made.closed  # Stream::close, then is_closed
    gc.collect()
    assert gone() is None  # and lets it go on close
    assert rx.info(made)[2] is True
    assert rx.close(made) is True  # idempotent

    token = rx.from_handle(0)
    assert token.is_default and rx.info(token) == (0, None, False)


def test_stream_constructors_refuse_bad_arguments(rx):
    with pytest.raises(TypeError, match="expected a custream.Stream, got int"):
        rx.from_bound(5)
    with pytest.raises(TypeError, match="expected a custream.Stream, got Producer"):
        rx.from_bound(Producer((0, H)))  # from_bound takes a Stream only
    with pytest.raises(ValueError, match="device must be a device ordinal .* got -2"):
        rx.from_handle(H, -2)
    with pytest.raises(ValueError):
        rx.from_handle(1, 0)  # custream's rule: a default-stream token takes no device


def test_current_stream(rx):
    assert rx.current() is custream.current_stream()
    s = Stream.from_handle(H)
    with s:
        assert rx.current() is s
        with rx.from_handle(H + 1) as inner:
            assert rx.current() is inner
    assert rx.current() is custream.current_stream()


@pytest.mark.skipif(custream.is_available(), reason="a CUDA driver is present")
def test_synchronize_without_a_driver_raises_custreams_error(rx):
    with pytest.raises(custream.CudaUnavailableError):
        rx.synchronize(Stream.from_handle(H))


@pytest.mark.skipif(custream.is_available(), reason="a CUDA driver is present")
def test_synchronize_timeout_reaches_custream(rx):
    s = Stream.from_handle(H)
    with pytest.raises(custream.CudaUnavailableError):
        rx.synchronize_timeout(s, 0.5)
    s.close()
    with pytest.raises(ValueError, match=r"^synchronize\(\) on a closed custream.Stream$"):
        rx.synchronize_timeout(s)


# The extension is built (or found) by the `rx` fixture in the test's own process, once: a
# build's time is the timeout's.
@pytest.mark.standin("libcuda.c", timeout=600)
def test_synchronize_and_close_on_the_standin_driver(rx, driver):
    s = custream.Stream()
    ours = custream._custream._notifier_streams()  # the context's notifiers, made with s
    assert driver.standin_live_streams() == 1 + ours and s.owned
    rx.synchronize(s)  # the C API's synchronize: the GIL let go while it waits
    assert rx.info(s) == (s.handle, 0, False)  # an owned stream knows its device
    w = custream.Stream.from_handle(s.handle)
    assert rx.info(w)[1] is None  # not learnt yet
    assert rx.id_and_device(w) == (s.id, 0)  # Stream::id and resolve_device: the C API's
    assert rx.info(w)[1] == 0
    w.close()
    assert rx.close(s) is True and s.closed
    assert driver.standin_live_streams() == ours  # Stream::close destroyed it, once
    with pytest.raises(ValueError, match="id on a closed custream.Stream"):
        rx.id_and_device(s)
    with pytest.raises(ValueError, match="closed"):
        rx.synchronize(s)


@pytest.mark.standin("capture.c", timeout=600)
def test_stream_memory_operations_go_through_the_c_api(rx, driver):
    driver.fake_mem_alloc.restype, driver.fake_mem_alloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    mem = driver.fake_mem_alloc(16)
    s = custream.Stream()
    rx.wait_value(s, mem, 0, 32, "eq")
    rx.write_value(s, mem + 8, 2**40, 64)
    s.synchronize()
    assert ctypes.c_uint64.from_address(mem + 8).value == 2**40
    with pytest.raises(ValueError, match=r"Custream_WriteValue\(\) width must be 32 or 64, got 16"):
        rx.write_value(s, mem, 1, 16)
    with pytest.raises(ValueError, match="not aligned to 8 bytes"):
        rx.wait_value(s, mem + 4, 1, 64, "geq")


# ---- to_python, share -------------------------------------------------------------------------


def test_to_python_releases_once_on_close(rx):
    s = rx.give(H, 2)
    assert type(s) is Stream and s.handle == H and s.device == 2 and not s.owned
    assert "borrowed with deleter" in repr(s)
    assert rx.released() == ([], 0)
    s.close()
    assert rx.released() == ([H], 1)  # ran with the handle, then dropped
    s.close()
    rx.close(s)
    del s
    gc.collect()
    assert rx.released() == ([H], 1)


def test_to_python_releases_once_on_deallocation(rx):
    s = rx.give(H + 1)
    gone = weakref.ref(s)
    del s
    gc.collect()
    assert gone() is None
    assert rx.released() == ([H + 1], 1)


def test_to_python_releases_once_when_threads_race_to_close(rx):
    streams = [rx.give(H + i) for i in range(50)]
    barrier = threading.Barrier(8)

    def closer():
        barrier.wait()
        for s in streams:
            s.close()

    threads = [threading.Thread(target=closer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    released, dropped = rx.released()
    assert sorted(released) == [H + i for i in range(50)] and dropped == 50


def test_a_release_that_panics_goes_to_the_unraisable_hook(rx, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    s = rx.give(H, panic=True)
    s.close()  # does not raise
    assert rx.released() == ([H], 1)  # it ran once, and the closure was dropped in the unwind
    (report,) = seen
    assert type(report.exc_value).__name__ == "PanicException"
    assert f"release of {H:#x} panicked on purpose" in str(report.exc_value)
    assert report.object == "pyo3_custream: the release given to to_python()"
    s.close()
    assert len(seen) == 1

    t = rx.give(H + 1, panic=True)
    del t  # the same from a deallocation
    gc.collect()
    assert len(seen) == 2 and rx.released() == ([H, H + 1], 2)


def test_a_panicking_release_keeps_the_exception_in_flight(rx, monkeypatch):
    """A release run by a deallocation while an exception propagates: the exception survives."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)

    def fails():
        s = rx.give(H, panic=True)  # noqa: F841 - released as the frame unwinds
        raise LookupError("the caller's own error")

    with pytest.raises(LookupError, match="the caller's own error"):
        fails()
    gc.collect()
    assert len(seen) == 1 and rx.released() == ([H], 1)


def test_on_error_nothing_is_taken(rx):
    with pytest.raises(ValueError, match="device must be a device ordinal .* got -3"):
        rx.give(H, -3)
    assert rx.released() == ([], 1)  # dropped without running
    with pytest.raises(ValueError):
        rx.give(1, 0)  # custream refuses a device with a token: its error, nothing taken
    assert rx.released() == ([], 2)
    with pytest.raises(ValueError):
        rx.share_owner(H, -1)
    assert rx.shared_strong_count() == 0  # the Arc went back


def test_share_holds_an_arc_clone_until_close(rx):
    s = rx.share_owner(H, 1)
    assert s.device == 1 and rx.shared_strong_count() == 1  # Python's clone only
    s.close()
    assert rx.shared_strong_count() == 0
    t = rx.share_owner(H)
    del t
    gc.collect()
    assert rx.shared_strong_count() == 0


# ---- Rust holds streams -----------------------------------------------------------------------


def test_a_stream_dropped_on_a_rust_thread_without_the_gil(rx):
    s = rx.give(H)
    p = Producer((0, H + 8))
    p_gone = weakref.ref(p)
    assert rx.hold(s) == 1 and rx.hold(p) == 2  # a Stream, and the wrapper of a protocol object
    s_gone = weakref.ref(s)
    del s, p
    gc.collect()
    assert s_gone() is not None and p_gone() is not None  # Rust holds them
    assert rx.released() == ([], 0)
    assert rx.drop_held_on_thread() == 2  # dropped on a std::thread that never attached
    # pyo3 lets the references go at the next entry into the extension, with the GIL.
    assert rx.released() == ([H], 1)
    gc.collect()
    assert s_gone() is None and p_gone() is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.isolated(timeout=120)  # forks: in a pytest process of its own, with no thread of another test's
def test_fork_child_never_runs_a_parents_release(rx):
    s = rx.give(H)
    shared = rx.share_owner(H + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with custream's threads running
        pid = os.fork()
    if pid == 0:  # the child: whatever happens, it ends here
        ok = False
        try:
            s.close()
            del shared
            gc.collect()
            ok = rx.released() == ([], 0) and rx.shared_strong_count() == 1
            mine = rx.give(H + 2)  # made in the child: the child's to release
            mine.close()
            ok = ok and rx.released() == ([H + 2], 1)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child ran a release of the parent's"
    s.close()
    shared.close()
    assert rx.released() == ([H], 1) and rx.shared_strong_count() == 0


def test_interpreter_exit_with_streams_rust_handed_over():
    """Streams given by Rust alive at exit: no crash, nothing on stderr but the one release
    run before finalization; none runs during it."""
    rc, out, err = run(f"""
        import threading, custream, custream_rust_ext as rx
        rx.give({H}, announce=True).close()  # before finalization: released
        kept = [rx.give({H} + i, announce=True) for i in range(1, 5)]
        shared = rx.share_owner({H + 8})
        rx.hold(rx.give({H + 9}, announce=True))  # held by Rust, never dropped
        cycle = [rx.give({H + 10}, announce=True)]
        cycle.append(cycle)  # freed by the collector at exit, if at all
        class Late:
            s = rx.give({H + 11}, announce=True)
        holder = threading.Thread(target=lambda: rx.hold(rx.give({H + 12}, announce=True)))
        holder.start(); holder.join()
        print("exiting")
    """)
    assert rc == 0, out + err
    assert out.strip() == "exiting"
    assert re.findall(r"custream_rust_ext: released (0x[0-9a-f]+)", err) == [f"{H:#x}"], err
    assert "panicked" not in err and "Fatal" not in err, err


# ---- the import check -------------------------------------------------------------------------


def test_import_reports_the_abi(rx):
    assert rx.import_custream() == custream.ABI_VERSION == 1


# The import checks below run in a pytest process of their own (tests/conftest.py): the
# extension must not have found custream's C API before them.
@pytest.mark.isolated(timeout=600)
def test_without_custream_every_entry_is_an_import_error_and_takes_nothing(monkeypatch):
    rx = load_ext()
    monkeypatch.setitem(sys.modules, "custream", None)  # as if it were not installed
    for call in (lambda: rx.handle_of(5), lambda: rx.take(5), lambda: rx.current(),
                 lambda: rx.give(H), lambda: rx.share_owner(H), lambda: rx.from_handle(H),
                 rx.import_custream):
        with pytest.raises(ImportError) as e:
            call()
        assert "custream is not installed (it is not on PyPI yet: pip install /path/to/custream" in str(e.value), e.value
        assert str(e.value).startswith("pyo3-custream 0.1.0 needs custream 0.1.0"), e.value
    assert rx.released() == ([], 1) and rx.shared_strong_count() == 0  # nothing taken
    monkeypatch.undo()  # installed after all: the next call imports it
    assert rx.handle_of(custream.Stream.from_handle(7)) == 7


@pytest.mark.isolated(timeout=600)
def test_a_custream_without_the_capsule_is_an_import_error(monkeypatch):
    import custream._custream as C

    rx = load_ext()
    monkeypatch.delattr(C, "_C_API")
    with pytest.raises(ImportError, match=r"no C API capsule custream\._custream\._C_API \(too old\?\)"):
        rx.handle_of(custream.Stream.from_handle(5))
    monkeypatch.undo()
    assert rx.handle_of(custream.Stream.from_handle(5)) == 5


STREAM = custream.Stream.__basicsize__  # 112, or 128 where the object header is 32 bytes
TABLE = ctypes.sizeof(_capi_ctypes.CAPI)  # the table custream.h declares


@pytest.mark.parametrize(
    "offset,value,message",
    [
        (0, 99, "custream C API version mismatch: pyo3-custream 0.1.0 was built against custream.h ABI 1 but the installed custream provides ABI 99"),
        (0, 0, "provides ABI 0"),
        (4, 64, "custream C API layout mismatch: pyo3-custream 0.1.0 was built against custream 0.1.0's table of "
         f"{TABLE} bytes and Stream of {STREAM} bytes, the installed custream 0.1.0 has 64 and {STREAM} (older than this "
         "crate); install custream 0.1.0 or newer"),
        (8, 96, f"the installed custream 0.1.0 has {TABLE} and 96 (older than this crate)"),
    ],
    ids=["newer-abi", "older-abi", "smaller-table", "smaller-struct"],
)
@pytest.mark.isolated(timeout=600)
def test_an_incompatible_custream_is_an_import_error(offset, value, message, monkeypatch):
    """A fake capsule: a copy of custream's table with one header field changed."""
    import struct

    import custream._custream as C

    rx = load_ext()
    name = b"custream._custream._C_API"
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    table = ctypes.create_string_buffer(ctypes.string_at(get(C._C_API, name), TABLE), TABLE)
    struct.pack_into("<I", table, offset, value)
    monkeypatch.setattr(C, "_C_API", new(ctypes.addressof(table), name, None))
    for call in (lambda: rx.handle_of(custream.Stream.from_handle(5)), lambda: rx.give(5)):
        with pytest.raises(ImportError) as e:
            call()
        assert message in str(e.value), e.value
    assert rx.released() == ([], 1)
    monkeypatch.undo()  # the real one: accepted (a failed check is not remembered)
    assert rx.handle_of(custream.Stream.from_handle(5)) == 5


# ---- the crate's version, and the Rust guide ----------------------------------------------------


def cargo_metadata():
    """`cargo metadata` of the workspace (the crate, custream and the test extension)."""
    import json

    if shutil.which("cargo") is None:
        missing_tool("cargo is not on PATH")
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return {p["name"]: p for p in json.loads(out.stdout)["packages"]}


def missing_tool(what):
    message = f"{what} (a Rust toolchain; pip install maturin)"
    if os.environ.get("CUSTREAM_REQUIRE_BUILD_TOOLS"):
        pytest.fail(message + "; CUSTREAM_REQUIRE_BUILD_TOOLS is set")
    pytest.skip(message)


def test_the_crate_is_the_packages_version_and_says_so():
    """The crate's version is the package's, as cargo resolves them (the extension built with
    it names both in its ImportError: the next test); it builds on the same Rust and pyo3 as
    custream and leaves the abi3 choice to the extension."""
    packages = cargo_metadata()
    crate, root = packages["pyo3-custream"], packages["custream"]
    assert crate["version"] == root["version"] == custream.__version__
    assert crate["rust_version"] == root["rust_version"]
    pyo3 = {p["name"]: {d["name"]: d for d in p["dependencies"] if d["kind"] is None}["pyo3"] for p in (crate, root)}
    assert pyo3["pyo3-custream"]["req"] == pyo3["custream"]["req"]
    assert not any("abi3" in f for f in pyo3["pyo3-custream"]["features"])


@pytest.mark.isolated(timeout=600)
def test_the_import_error_names_the_crates_and_custreams_version(monkeypatch):
    rx = load_ext()
    monkeypatch.setitem(sys.modules, "custream", None)
    v = custream.__version__
    with pytest.raises(ImportError, match=f"^pyo3-custream {re.escape(v)} needs custream {re.escape(v)}"):
        rx.import_custream()


sys.path.insert(0, str(ROOT / "scripts" / "generate"))
import rust_guide  # noqa: E402 (scripts/generate/rust_guide.py writes docs/rust.md from the crate's docs)

sys.path.pop(0)
GUIDE = ROOT / "docs" / "rust.md"
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)


def test_the_rust_guide_is_the_crates_own_docs():
    """One source: docs/rust.md is what scripts/generate/rust_guide.py writes from the files the crate
    includes as its documentation (whose Rust blocks cargo runs as doctests)."""
    assert rust_guide.sources()[0] == CRATE / "README.md"
    assert len(rust_guide.sources()) >= 3
    assert GUIDE.read_text() == rust_guide.page(), "docs/rust.md is stale: run python scripts/generate/rust_guide.py"
    # It reads on its own: no directive a code host would not show, no link only rustdoc resolves.
    text = GUIDE.read_text()
    assert "{include}" not in text and "crate::" not in text and "docs.rs" not in text
    commands = "\n".join(code for info, code in FENCE.findall(text) if info == "bash")
    assert "pip install ../custream" in commands, "the recipe installs custream from its clone"


@pytest.mark.parametrize("variant", ["plain", "cudarc"])
def test_the_rust_guides_recipe_builds_and_runs(tmp_path, variant):
    """The guide's recipe as a user copies it: a clone of custream (here, this repository),
    beside it a folder with the page's Cargo.toml, pyproject.toml and first Rust example as
    src/lib.rs, then the page's commands. The cudarc variant: the same folder with the page's
    cudarc `[dependencies]` in place of the first ones and its cudarc example as src/lib.rs,
    then its own commands; without a driver, its call raises what the page says. custream is
    already installed here, and the extension goes into a folder of the test's own rather
    than this environment."""
    if shutil.which("cargo") is None:
        missing_tool("cargo is not on PATH")
    host = re.search(r"^host: (\S+)", subprocess.run(["rustc", "-vV"], capture_output=True, text=True).stdout, re.M)
    if host and not host.group(1).startswith(platform.machine()):
        # An emulated run (scripts/sid/test-aarch64.sh): the native cargo builds for its own host.
        pytest.skip(f"cargo builds for {host.group(1)}, not for this {platform.machine()} interpreter")
    try:
        import maturin  # noqa: F401
    except ImportError:
        missing_tool(f"maturin is not installed in {sys.executable}")
    text = GUIDE.read_text()
    blocks = FENCE.findall(text)
    tomls = [code for info, code in blocks if info == "toml"]
    (cargo,) = [t for t in tomls if "[lib]" in t]
    (pyproject,) = [t for t in tomls if "[build-system]" in t]
    (cudarc_deps,) = [t for t in tomls if t.startswith("[dependencies]\n")]
    rusts = [code for info, code in blocks if info == "rust"]
    (cudarc_lib,) = [code for code in rusts if "#[pymodule]\nfn mylib(" in code and "from_cudarc" in code]
    plain_bash, cudarc_bash = [code for info, code in blocks if info == "bash"]
    assert 'crate-type = ["cdylib"]' in cargo and 'path = "../custream/pyo3-custream"' in cargo
    assert "#[pymodule]\nfn mylib(" in rusts[0]
    if variant == "plain":
        lib, bash = rusts[0], plain_bash
    else:
        assert 'features = ["cudarc"]' in cudarc_deps and "\ncudarc = " in cudarc_deps
        # The user's edit: the [dependencies] table replaced by the page's cudarc one.
        cargo = re.sub(r"^\[dependencies\]\n(?:[^\[\n][^\n]*\n|\n)*", cudarc_deps + "\n", cargo, count=1, flags=re.M)
        assert cargo.count("[dependencies]") == 1 and "cudarc = " in cargo, cargo
        lib, bash = cudarc_lib, cudarc_bash

    (tmp_path / "custream").symlink_to(ROOT)  # the clone
    project = tmp_path / "mylib"
    (project / "src").mkdir(parents=True)
    (project / "Cargo.toml").write_text(cargo)
    (project / "pyproject.toml").write_text(pyproject)
    (project / "src" / "lib.rs").write_text(lib)
    # The versions this repository's tests resolve (cargo keeps what the recipe uses): no
    # registry index is needed for a build that custream's own build already fetched.
    shutil.copyfile(ROOT / "Cargo.lock", project / "Cargo.lock")
    site = tmp_path / "site"
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", str(ROOT / "target"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    ran = []
    for line in bash.splitlines():
        command, _, comment = line.partition("  # ")
        argv = command.split()
        if argv == ["pip", "install", "../custream"]:
            assert custream.__file__  # custream itself: installed in this environment already
            continue
        if argv == ["pip", "install", "."]:
            argv = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--target", str(site), "."]
        elif argv[:2] == ["python", "-c"]:
            argv = [sys.executable, "-c", command.split(" -c ", 1)[1].strip().strip('"')]
        else:
            raise AssertionError(f"a command the test does not know how to run: {line!r}")
        out = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
        ran.append(argv[1])
        if argv[1] == "-c" and variant == "cudarc":
            if custream.is_available():
                shown = re.escape(comment.strip()).replace(re.escape("..."), ".+")
                assert out.returncode == 0 and re.fullmatch(shown, out.stdout.strip()), out.stdout + out.stderr
            else:
                said = re.search(r"raises `(custream\.CudaUnavailableError: [^`]+)`", " ".join(text.split()))
                assert said, "the page says what the call raises without a driver"
                last = out.stderr.rstrip().splitlines()[-1]
                assert out.returncode != 0 and last.startswith(said.group(1).split("...")[0]), out.stderr
            continue
        assert out.returncode == 0, f"{line}\n{out.stdout}{out.stderr}"
        if argv[1] == "-c":
            assert out.stdout.strip() == comment.strip(), out.stdout
    assert ran == ["-m", "-c"], ran  # it built the module, then called it
    assert list(site.glob("mylib/*.so")), "the module pip installed"
