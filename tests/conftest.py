"""The ``standin`` marker: a test run against a stand-in libcuda (tests/standin/), in a
pytest process of its own; and ``isolated``: a test in a pytest process of its own with no
stand-in (one whose crash must fail only itself).

custream opens libcuda once, when it is imported, from ``CUSTREAM_LIBCUDA`` if set; this
process has no driver. A test marked ``@pytest.mark.standin("capture.c")`` is an ordinary
test function: here it is not run but handed, by node id, to a fresh ``python -m pytest``
with ``CUSTREAM_LIBCUDA`` naming the stand-in built from that model (once per session), and
the child's reports (setup, call, teardown, with the test's own traceback) are reported as
this process's. In the child the test runs as any other and gets the stand-in itself (ctypes,
for its counters and knobs) from the ``driver`` fixture.

The marker takes the model (a file in tests/standin/), then C compiler flags, and as keywords
``omit`` and ``also`` (entry points left out of or added to the generated stubs: see
standin.build), ``source`` (C source compiled as the library instead, with no stubs: a
driver that exports only what it says), ``env`` (more environment for the child) and
``timeout`` (seconds, 60 by default). ``env`` may be a function, called here before the child
starts, that returns the mapping (to build what the child is to find); a value of None leaves
that variable unset in the child. Past the timeout the child dumps every thread's stack and
exits (faulthandler), so a hang fails instead of hanging the run; a Rust panic or a fatal
Python error written to its stderr, in a test or at exit, fails the test even where it passed,
unless the marker's ``allow`` names it (a test of that very output). ``isolated`` takes
``timeout``, ``env`` and ``allow`` too.
"""

import ctypes
import faulthandler
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import pytest

import standin

# Set in a child: the file its reports are written to (one JSON object a line).
REPORTS = "CUSTREAM_STANDIN_REPORTS"
IN_CHILD = REPORTS in os.environ
# What fails a test when it shows in the child's stderr.
BAD_OUTPUT = ("panicked", "Fatal Python error")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "standin(model, *cflags, omit=(), also=(), source=None, env={}, timeout=60, allow=()): run in a fresh pytest "
        "process against the stand-in libcuda built from tests/standin/<model> (tests/conftest.py)",
    )
    config.addinivalue_line(
        "markers",
        "isolated(env={}, timeout=60, allow=()): run in a pytest process of its own, so that a crash fails only "
        "this test (tests/conftest.py)",
    )
    if IN_CHILD:
        _child_config.append(config)
        # A copy of the real stderr, taken while pytest's capture is suspended: where a hang's
        # stacks go (the test's own stderr is captured into its report, lost at an exit).
        config.stash[_stderr_key] = os.fdopen(os.dup(2), "w")


_stderr_key = pytest.StashKey()
_child_config = []
_libs_key = pytest.StashKey()


# ---- in the child ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def driver():
    """The stand-in libcuda custream loaded (ctypes), in a test marked ``standin``."""
    if not IN_CHILD:
        pytest.fail("the driver fixture is for tests marked @pytest.mark.standin(...)")
    return ctypes.CDLL(os.environ["CUSTREAM_LIBCUDA"])


@pytest.fixture(scope="session")
def watchdog_stderr(request):
    """In a child (a test marked ``standin`` or ``isolated``): the copy of the real stderr that
    the watchdog writes every thread's stack to, for whatever else a hang should show there
    (tests/gpu/conftest.py's native stacks); the test's own stderr is captured, lost at the
    watchdog's exit. None in this process."""
    return request.config.stash[_stderr_key] if IN_CHILD else None


@pytest.fixture(scope="session")
def standin_lib(tmp_path_factory):
    """The path of tests/standin/libcuda.c built, for a check that runs a fresh interpreter
    itself (standin.script)."""
    return standin.build("libcuda.c", tmp_path_factory.mktemp("standin"))


@pytest.fixture
def kernel(driver):
    """``kernel(stream, ms)``: capture.c's stand-in for a kernel, ``ms`` of work queued on the
    stream (its worker thread sleeps), recorded as a node in a capture."""
    driver.fake_kernel.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lambda s, ms: driver.fake_kernel(s.handle, ms)


if IN_CHILD:

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        marker = _marker(item)
        timeout = marker.kwargs.get("timeout", 60) if marker else 60
        end = time.monotonic() + timeout

        def watch():
            left = max(1, end - time.monotonic())
            faulthandler.dump_traceback_later(left, exit=True, file=item.config.stash[_stderr_key])

        # A forked child has no watchdog thread (cancelling one there would hang): the watch
        # stops across a test's fork and goes on in this process.
        _fork_hooks[:] = [faulthandler.cancel_dump_traceback_later, watch]
        watch()
        try:
            return (yield)
        finally:
            _fork_hooks[:] = []
            faulthandler.cancel_dump_traceback_later()

    _fork_hooks = []
    os.register_at_fork(
        before=lambda: _fork_hooks and _fork_hooks[0](),
        after_in_parent=lambda: _fork_hooks and _fork_hooks[1](),
    )

    def pytest_runtest_logreport(report):
        config = _child_config[0]
        data = config.hook.pytest_report_to_serializable(config=config, report=report)
        with open(os.environ[REPORTS], "a") as f:
            f.write(json.dumps(data) + "\n")


# ---- in this process ---------------------------------------------------------------------------


def _marker(item):
    """The item's ``standin`` or ``isolated`` marker, or None."""
    return item.get_closest_marker("standin") or item.get_closest_marker("isolated")


def _library(config, marker):
    """The stand-in the marker names (or the C ``source`` it gives, compiled as it is), built
    once per session."""
    model, *flags = marker.args or ("libcuda.c",)
    omit, also = tuple(marker.kwargs.get("omit", ())), tuple(marker.kwargs.get("also", ()))
    source = marker.kwargs.get("source")
    libs = config.stash.setdefault(_libs_key, {})
    key = (model, tuple(flags), omit, also, source)
    if key not in libs:
        folder = Path(tempfile.mkdtemp(prefix="custream-standin-"))
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
        if source is not None:
            libs[key] = standin.compile_library(source, folder / "libcuda.so.1", *flags)
        else:
            libs[key] = standin.build(model, folder, *flags, omit=omit, also=also)
    return libs[key]


def _report(item, when, outcome, longrepr):
    return pytest.TestReport(item.nodeid, item.location, {}, outcome, longrepr, when, sections=[])


def _run_child(item, marker):
    """The child's reports of `item`, failed where the child went wrong around them."""
    config = item.config
    timeout = marker.kwargs.get("timeout", 60)
    try:
        lib = _library(config, marker) if marker.name == "standin" else None
        extra = marker.kwargs.get("env", {})
        if callable(extra):  # made here, before the child starts (libraries it is to find, say)
            extra = extra()
    except pytest.skip.Exception as e:
        return [_report(item, "setup", "skipped", (str(item.path), item.location[1], f"Skipped: {e.msg}"))]
    except Exception as e:  # noqa: BLE001 - the build's failure is the test's
        return [_report(item, "setup", "failed", f"preparing the test's process ({marker.args}) failed: {e!r}")]
    with tempfile.TemporaryDirectory(prefix="custream-standin-run-") as folder:
        reports_file = os.path.join(folder, "reports.jsonl")
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
        env.update(extra, **{REPORTS: reports_file})
        env = {k: v for k, v in env.items() if v is not None}  # None: left unset in the child
        if lib is not None:
            env["CUSTREAM_LIBCUDA"] = str(lib)
        cmd = [sys.executable, "-m", "pytest", item.nodeid, "-q", "-p", "no:cacheprovider",
               "-p", "no:hypothesispytest", "--rootdir", str(config.rootpath)]
        if config.inipath:
            cmd += ["-c", str(config.inipath)]
        problem = None
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=config.rootpath,
                                 timeout=timeout + 60)
            stdout, stderr, rc = out.stdout, out.stderr, out.returncode
        except subprocess.TimeoutExpired as e:
            stdout, stderr, rc = _text(e.stdout), _text(e.stderr), None
            problem = f"the child pytest was still running {timeout + 60} s in (killed)"
        reports = []
        if os.path.exists(reports_file):
            with open(reports_file) as f:
                reports = [config.hook.pytest_report_from_serializable(config=config, data=json.loads(line))
                           for line in f if line.strip()]
    reports = [r for r in reports if r.nodeid == item.nodeid]
    for r in reports:
        if isinstance(r.longrepr, list):  # a skip's (path, line, reason), a list through JSON
            r.longrepr = tuple(r.longrepr)
    failed = any(r.failed for r in reports)
    if problem is None and "Timeout (" in stderr:
        problem = f"the test ran past its timeout ({timeout} s): every thread's stack is below"
    if problem is None:
        if rc not in (0, 1) or (rc == 1 and not failed):
            problem = f"the child pytest exited with {rc}"
        elif not any(r.when == "teardown" for r in reports):
            problem = "the child pytest did not run the test to its end"
    captured = "".join(content for r in reports for title, content in r.sections if "stderr" in title)
    for bad in BAD_OUTPUT:
        if bad in marker.kwargs.get("allow", ()):  # a test about that very output
            continue
        if problem is None and (bad in stderr or bad in captured):
            problem = f"{bad!r} in the test's stderr"
    if problem is None:
        return reports
    detail = f"{problem}\n---- child stdout ----\n{stdout[-20000:]}\n---- child stderr ----\n{stderr[-20000:]}"
    whens = {r.when for r in reports}
    if "setup" not in whens:
        reports.insert(0, _report(item, "setup", "passed", None))
    target = next((r for r in reports if r.when == "call"), None)
    if target is None and not any(r.failed or r.skipped for r in reports):
        target = _report(item, "call", "passed", None)
        reports.insert(1, target)
    if target is None:
        target = reports[0]
    if target.failed:
        target.longrepr = f"{target.longrepr}\n\n{detail}"
    else:
        target.outcome, target.longrepr = "failed", detail
    if "teardown" not in whens:
        reports.append(_report(item, "teardown", "passed", None))
    return reports


def _text(data):
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


if not IN_CHILD:

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(item, nextitem):
        marker = _marker(item)
        if marker is None:
            return None
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for report in _run_child(item, marker):
            item.ihook.pytest_runtest_logreport(report=report)
        # Nothing was set up here for this test; what earlier tests set up and the next one
        # does not share is torn down as after any test (pytest's own runtestprotocol does
        # this through the session's SetupState, which has no public name).
        try:
            item.session._setupstate.teardown_exact(nextitem)
        except Exception:  # noqa: BLE001 - reported as this item's teardown error
            item.ihook.pytest_runtest_logreport(report=_report(item, "teardown", "failed", traceback.format_exc()))
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True
