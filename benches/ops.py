"""The rows (docs/design.md's targets) and each library's setup (defining `s` and its handle `H`) and spellings."""

from collections import namedtuple

class Op(namedtuple("Op", "key title bound raw load unit gpu times", defaults=(None, None, False, "ns", False, None))):
    """A row; its target: <= `bound` `unit`, `raw` x the C loop, `times` = (factor, lib, key) x that figure, `load`."""
    @property
    def target(self) -> str:
        if self.times is not None:
            factor, lib, key = self.times
            return f"<= {factor:g}x {OPS[key].title if lib == 'custream' else lib}"
        return (f"<= {self.bound:g} {self.unit}" if self.bound is not None else f"<= {self.raw:g}x raw" if self.raw
                else "one load, no call" if self.load else "")

OPERATIONS = [
    Op("cuda_stream", "s.__cuda_stream__()", bound=35),
    Op("handle_int", "handle as Python int", bound=25),
    Op("wrap_protocol", "wrap a protocol object", bound=150),
    Op("wrap_int", "wrap a raw int handle", bound=150),
    Op("create_destroy", "create + destroy", raw=1.15, gpu=True),
    Op("synchronize", "synchronize, idle stream", raw=1.15, gpu=True),
    Op("query", "query, idle stream", raw=1.2, gpu=True),
    Op("import", "import", bound=15, unit="ms"),
    Op("cython_handle_read", "Cython handle read", load=True),
    Op("contextvar_get", "ContextVar.get()"),
    Op("current_stream", "current stream", times=(1.5, "custream", "contextvar_get")),
    Op("with_stream", "enter + leave with s:", times=(0.5, "torch", "with_stream")),
    Op("pool_get", "pool.get()", bound=60, gpu=True),
    Op("pool_get_priority", "pool.get(priority=)", times=(1.5, "custream", "pool_get"), gpu=True),
    Op("pool_lease", "pool.lease() enter + exit", times=(3, "custream", "pool_get"), gpu=True),
    Op("stream_id", "s.id (the driver's id)", times=(1, "custream", "handle_int"), gpu=True),
    Op("create_alone", "create + destroy, no other stream alive", times=(1.1, "custream", "create_destroy"), gpu=True),
    Op("green_create_destroy", "create + destroy in a green context", raw=1.15, gpu=True),
    Op("sync_policy_set", "s.sync_policy = 'spin'", raw=1.3, gpu=True),
    Op("sync_policy_get", "s.sync_policy", raw=1.3, gpu=True),
    # cpp_: a nanobind function of cpp_tests/casters.cpp; rust_: a #[pyfunction] of tests/rust_ext (whole cost)
    Op("cpp_uintptr", "C++ f(uintptr_t), an int"),
    Op("cpp_stream_ref", "C++ f(custream::stream_ref)", times=(1.3, "custream", "cpp_uintptr")),
    Op("rust_usize", "Rust f(usize), an int"),
    Op("rust_stream_ref", "Rust f(pyo3_custream::StreamRef)", times=(1.3, "custream", "rust_usize")),
]
OPS = {op.key: op for op in OPERATIONS}
# Timed in turn with the least binding's statement, in custream's worker (no driver). `with` statements are timed as
# written (no `with_` call): beside the same `with` over floor_ext.c's least context manager, CPython's own floor.
IN_TURN = {"handle_int": "fs.handle", "pool_lease": "with fs.lease(): pass"}
# Rows whose target is a multiple of another of custream's rows, timed in turn with that row too (issue 39's): their
# verdict takes the median ratio per pair, which the machine's drift between two rows' medians spares.
PAIRED = ("pool_get_priority", "pool_lease", "stream_id")
ALONE = ("import custream, time\ncustream.Stream().close()\nt = time.perf_counter()\n"  # nothing else holds the context
         "for _ in range(2000):\n    custream.Stream().close()\nprint((time.perf_counter() - t) / 2000 * 1e9)\n")

NA = namedtuple("NA", "reason")  # an operation the library has not, and why
Lib = namedtuple("Lib", "name import_stmt dists setup ops notes not_best cpu_setup", defaults=({}, (), None))
NOT_APPLICABLE, NEEDS_GPU = {"na": "not applicable"}, "needs a GPU (run with --gpu)"
NO_CURRENT, NO_POOL = NA("no current-stream notion"), NA("no stream pool")
POLICY = ("sync_policy_set", "sync_policy_get")
NO_SETTINGS = NA("no stream-level settings: cuStreamSetAttribute on the raw handle (cuda.bindings)")
NEITHER = {"current_stream": NO_CURRENT, "with_stream": NO_CURRENT, "pool_get": NO_POOL,
           **dict.fromkeys(POLICY, NO_SETTINGS)}
FAKE_H = 0x7F3A2C001230  # the handle the CPU run wraps: nothing calls the driver
# The least producer the protocol allows (what `wrap_protocol` wraps); `with_(cm)` enters and leaves a block.
PRODUCER = ("class Producer:\n    __slots__ = ('_t',)\n    def __init__(self, h):\n        self._t = (0, h)\n"
            "    def __cuda_stream__(self):\n        return self._t\ndef with_(cm):\n    with cm:\n        pass\n")
CV = "import contextvars\ncv = contextvars.ContextVar('bench', default=None)\n"

CUSTREAM = Lib(
    "custream", "import custream", ("custream",),
    "CS = custream.Stream\ns = CS()\nH = s.handle\npool = custream.StreamPool(4)\n"
    "tiers = custream.StreamPool(4, priorities=(0, -1))\n"
    "try:\n    gc = custream.GreenContext(16)\n"
    "except custream.CudaError:\n    gc = None  # a driver before 12.4\n" + CV,
    {"cuda_stream": "s.__cuda_stream__()", "handle_int": "s.handle", "wrap_protocol": "custream.as_stream(p)",
     "wrap_int": "CS.from_handle(H)", "create_destroy": "CS().close()", "synchronize": "s.synchronize()",
     "query": "s.query()", "contextvar_get": "cv.get()", "current_stream": "custream.current_stream()",
     "with_stream": "with_(s)", "pool_get": "pool.get()", "pool_get_priority": "tiers.get(priority=-1)",
     "pool_lease": "with pool.lease(): pass", "stream_id": "s.id", "cpp_uintptr": "nb.handle_of_uintptr(H)",
     "cpp_stream_ref": "nb.handle_of(s)", "rust_usize": "rx.handle_of_usize(H)", "rust_stream_ref": "rx.handle_of(s)",
     "green_create_destroy": "gc.create_stream().close()", "sync_policy_set": "s.sync_policy = 'spin'",
     "sync_policy_get": "s.sync_policy"},
    cpu_setup=f"CS = custream.Stream\nH = {FAKE_H}\ns = CS.from_handle(H)\n" + CV)

# The least a binding can add (floor_ext.c), in the primary context raw_driver.c (loaded first) leaves current
LEAST = Lib("least binding", "", (), "H = fcreate()\n",
            {"create_destroy": "fdestroy(fcreate())", "synchronize": "fsync(H)", "query": "fquery(H)",
             "sync_policy_set": "fsetpolicy(H, 2)", "sync_policy_get": "fpolicy(H)"})

DESTROYED_ON_DEALLOC = "the stream is destroyed when the object is deallocated"
PEERS = [
    Lib("cuda.core", "import cuda.core", ("cuda-core",),
        "try:\n    from cuda.core import Device, Stream as CoreStream\n"
        "except ImportError:\n    from cuda.core.experimental import Device, Stream as CoreStream\n"
        "dev = Device(0)\ndev.set_current()\ns = dev.create_stream()\nH = int(s.handle)\n",
        {"cuda_stream": "s.__cuda_stream__()", "handle_int": "int(s.handle)", "wrap_protocol": "dev.create_stream(p)",
         "wrap_int": "CoreStream.from_handle(H)", "create_destroy": "dev.create_stream().close()",
         "synchronize": "s.sync()", "query": NA("cuda.core's Stream has no query()"), **NEITHER,
         **dict.fromkeys(POLICY, NA("cuda.core's Stream has no sync policy (its work on one, cuda-python #2637, was "
                                    "closed)"))}),
    Lib("CuPy", "import cupy", ("cupy-cuda13x", "cupy-cuda12x", "cupy"),
        "s = cupy.cuda.Stream(non_blocking=True)\nH = s.ptr\n",
        {"cuda_stream": "s.__cuda_stream__()", "handle_int": "s.ptr", "wrap_int": "cupy.cuda.ExternalStream(H)",
         "wrap_protocol": "cupy.cuda.Stream.from_external(p)", "create_destroy": "cupy.cuda.Stream(non_blocking=True)",
         "synchronize": "s.synchronize()", "query": "s.done", **NEITHER,
         "current_stream": "cupy.cuda.get_current_stream()", "with_stream": "with_(s)"},
        notes={"create_destroy": DESTROYED_ON_DEALLOC}),
    Lib("torch", "import torch", ("torch",), "torch.cuda.init()\ns = torch.cuda.Stream()\nH = s.cuda_stream\n",
        {"cuda_stream": "s.__cuda_stream__()", "handle_int": "s.cuda_stream",
         "wrap_protocol": NA("torch has no __cuda_stream__ consumer (ExternalStream takes an int)"),
         "wrap_int": ("torch.cuda.ExternalStream(H)", "torch.cuda.get_stream_from_external(H)"),
         "create_destroy": "torch.cuda.Stream()", "synchronize": "s.synchronize()", "query": "s.query()",
         "current_stream": "torch.cuda.current_stream()", "with_stream": "with_(torch.cuda.stream(s))",
         "pool_get": NA("torch's stream pool is internal (torch.cuda.Stream() draws from it: see create + destroy)"),
         "pool_get_priority": "torch.cuda.Stream(priority=-1)",
         "pool_lease": NA("torch's pool only hands out round-robin"),
         **dict.fromkeys(POLICY, NO_SETTINGS),
         "cpp_stream_ref": "nb.handle_of(s)", "rust_stream_ref": "rx.handle_of(s)"},
        notes={"create_destroy": "torch.cuda.Stream() hands out a stream from a fixed pool and never destroys it: "
                                 "not a create + destroy, kept out of 'best peer'"}, not_best=("create_destroy",)),
    Lib("numba", "import numba.cuda", ("numba-cuda", "numba"), "s = numba.cuda.stream()\nH = s.__cuda_stream__()[1]\n",
        {"cuda_stream": "s.__cuda_stream__()", "handle_int": ("s.handle.value", "int(s.handle)", "int(s)"),
         "wrap_protocol": NA("numba.cuda.external_stream takes an int, not a protocol object"),
         "wrap_int": "numba.cuda.external_stream(H)", "create_destroy": "numba.cuda.stream()",
         "synchronize": "s.synchronize()", "query": NA("numba's Stream has no query()"), **NEITHER},
        notes={"create_destroy": "numba queues the destroy and runs queued destroys in batches; "
                                 "the figure is amortized"}),
    Lib("rmm", "import rmm", ("rmm-cu13", "rmm-cu12", "rmm"),
        "from rmm.pylibrmm.stream import Stream as RmmStream\ns = RmmStream()\nH = s.__cuda_stream__()[1]\n"
        "from rmm.pylibrmm.cuda_stream_pool import CudaStreamPool\npool = CudaStreamPool(4)\n",
        {"cuda_stream": "s.__cuda_stream__()",
         "handle_int": NA("rmm's Stream gives its handle as an int only through __cuda_stream__()"),
         "wrap_protocol": "RmmStream(p)", "wrap_int": NA("rmm's Stream cannot wrap an int handle from Python"),
         "create_destroy": "RmmStream()", "synchronize": "s.synchronize()", "query": NA("rmm's Stream has no query()"),
         **NEITHER, "pool_get": "pool.get_stream()",
         "pool_lease": NA("rmm's CudaStreamPool only hands out round-robin")},
        notes={"create_destroy": DESTROYED_ON_DEALLOC}),
]
LIBS = {lib.name: lib for lib in [CUSTREAM, LEAST, *PEERS]}
