"""What is measured: the operations of DESIGN.md's target table, and how each library spells
them.

Each library gets a `setup` (run once in a fresh interpreter; it defines `s`, a stream the
library owns, `H`, its handle as an int, and `p`, a protocol producer over `H`) and, per
operation, the statements to time. Where a library has several spellings the first that
runs is used and the one used is recorded. An operation a library lacks is `NA(reason)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Target:
    """A DESIGN.md target: an absolute bound (`bound`, in the operation's unit), a ratio to the
    raw driver (`raw`), or "one load, no call" (`load`)."""

    bound: float | None = None
    raw: float | None = None
    load: bool = False

    def describe(self, unit: str) -> str:
        if self.bound is None and self.raw is None and not self.load:
            return ""
        if self.bound is not None:
            return f"<= {self.bound:g} {unit}"
        if self.raw is not None:
            return f"<= {self.raw:g}x raw"
        return "one load, no call"


@dataclass(frozen=True)
class Op:
    key: str
    title: str
    target: Target
    unit: str = "ns"
    gpu: bool = False  # needs a device for every library
    peers_measured: str = ""  # DESIGN.md's figures, for the reader


OPERATIONS = [
    Op("cuda_stream", "s.__cuda_stream__()", Target(bound=35), peers_measured="CuPy 88, cuda.core 90, torch 183, rmm 193, numba 205"),
    Op("handle_int", "handle as Python int", Target(bound=25), peers_measured="CuPy 21, torch 90, cuda.core 1274"),
    Op("wrap_protocol", "wrap a protocol object", Target(bound=150), peers_measured="rmm 278, cuda.core 749"),
    Op("wrap_int", "wrap a raw int handle", Target(bound=150), peers_measured="CuPy 3539, cuda.core 8713, torch 9050, numba 11193"),
    Op("create_destroy", "create + destroy", Target(raw=1.15), gpu=True, peers_measured="raw 5121, rmm 6061, CuPy 7338, cuda.core 8561, numba 25150"),
    Op("synchronize", "synchronize, idle stream", Target(raw=1.15), gpu=True, peers_measured="raw 403, rmm 493, cuda.core 571, CuPy 705, torch 1312, numba 2300"),
    Op("query", "query, idle stream", Target(raw=1.2), gpu=True, peers_measured="raw 273"),
    Op("import", "import", Target(bound=15), unit="ms", peers_measured="CuPy 417, cuda.core 530, torch 3426"),
    Op("cython_handle_read", "Cython handle read", Target(load=True), peers_measured="rmm: a cdef field"),
]
OP_KEYS = [op.key for op in OPERATIONS]

# Measured for custream only, beside the table: no target, no peer.
EXTRAS = [
    Op("as_stream_self", "as_stream(a custream.Stream)", Target()),
]
OPS = {op.key: op for op in OPERATIONS + EXTRAS}


@dataclass(frozen=True)
class Part:
    """A pair timed in the paired workers (benches/run.py --rounds) to split custream's gap
    to raw into its parts: `a` less `b`, each a statement in custream's GPU setup namespace
    or `raw:LOOP`, a loop of raw_driver.c. Python statements include the timing loop's own
    cost (about 5 ns); the C loops, next to none."""

    op: str
    label: str
    a: str
    b: str


# The least a Python binding can do for the ratio-to-raw operations: benches/floor_ext.c, a C
# extension with one function per driver call, timed against the raw loop in the paired
# workers as custream is.
FLOOR_BINDING = {
    "create_destroy": "fdestroy(fcreate())",
    "synchronize": "fsync(H)",
    "query": "fquery(H)",
}

# The peers timed in the paired rounds too, against raw in their own fresh workers: the best
# peers of DESIGN.md's ratio rows (rmm, CuPy) and NVIDIA's own (cuda.core). The others are
# timed in the single pass only, which keeps a full run within the GPU machine's budget.
PAIRED_PEERS = ("rmm", "CuPy", "cuda.core")

BREAKDOWN = [
    Part("create_destroy", "custream's own work: Stream().close() less its 8 driver calls made from C",
         "CS().close()", "raw:custream_call_sequence"),
    Part("create_destroy", "custream's driver calls: those 8 less cuStreamCreate + cuStreamDestroy",
         "raw:custream_call_sequence", "raw:create_destroy"),
    Part("create_destroy", "a Stream made and closed with no driver call: from_handle(H).close() less the empty loop",
         "CS.from_handle(H).close()", "pass"),
    Part("create_destroy", "letting the GIL go and taking it back: a no-op called through ctypes.CDLL less ctypes.PyDLL",
         "nop_gil_released()", "nop_gil_held()"),
    Part("query", "custream's own work: s.query() less its 2 driver calls made from C",
         "s.query()", "raw:query_checked"),
    Part("query", "the context-reset check: cuCtxGetId + cuStreamQuery less cuStreamQuery",
         "raw:query_checked", "raw:query"),
    Part("query", "calling a method of the stream: s.__cuda_stream__() less the empty loop",
         "s.__cuda_stream__()", "pass"),
]


@dataclass(frozen=True)
class NA:
    reason: str


@dataclass(frozen=True)
class Lib:
    name: str  # as printed
    import_stmt: str  # timed in fresh interpreters for the import row
    version_expr: str
    setup: str  # GPU setup: defines s, H, p
    ops: dict = field(default_factory=dict)  # op key -> [stmt, ...] | NA
    notes: dict = field(default_factory=dict)  # op key -> note printed under the table
    not_best: tuple = ()  # op keys where the figure measures something else: kept out of "best peer"
    dists: tuple = ()  # distribution names to ask importlib.metadata when version_expr fails


# A producer as small as the protocol allows: what every library wraps in `wrap_protocol`.
PRODUCER = '''
class Producer:
    __slots__ = ("_t",)
    def __init__(self, h):
        self._t = (0, h)
    def __cuda_stream__(self):
        return self._t
'''

CUSTREAM = Lib(
    name="custream",
    import_stmt="import custream",
    version_expr="custream.__version__",
    dists=("custream",),
    # The device's primary context current in the timing thread, as in raw_driver.c and as
    # every peer's own setup leaves it (custream itself never changes the current context).
    setup=("import ctypes, custream\n_cu = ctypes.CDLL('libcuda.so.1')\n_ctx = ctypes.c_void_p()\n"
           "assert _cu.cuInit(0) == 0 and _cu.cuDevicePrimaryCtxRetain(ctypes.byref(_ctx), 0) == 0\n"
           "assert _cu.cuCtxSetCurrent(_ctx) == 0\n"
           "CS = custream.Stream\ns = CS()\nH = s.handle\np = Producer(H)\n"),
    ops={
        "cuda_stream": ["s.__cuda_stream__()"],
        "handle_int": ["s.handle"],
        "wrap_protocol": ["custream.as_stream(p)"],
        "wrap_int": ["CS.from_handle(H)"],
        "as_stream_self": ["custream.as_stream(s)"],
        "create_destroy": ["CS().close()"],
        "synchronize": ["s.synchronize()"],
        "query": ["s.query()"],
    },
)

# The CPU run wraps a made-up handle: nothing below calls the driver.
CUSTREAM_CPU_SETUP = "import custream\nCS = custream.Stream\nH = 0x7F3A2C001230\ns = CS.from_handle(H)\np = Producer(H)\n"

PEERS = [
    Lib(
        name="cuda.core",
        import_stmt="import cuda.core",
        version_expr="cuda.core.__version__",
        dists=("cuda-core",),
        setup=(
            "import cuda.core\n"
            "try:\n    from cuda.core import Device, Stream as CoreStream\n"
            "except ImportError:\n    from cuda.core.experimental import Device, Stream as CoreStream\n"
            "dev = Device(0)\ndev.set_current()\ns = dev.create_stream()\nH = int(s.handle)\np = Producer(H)\n"
        ),
        ops={
            "cuda_stream": ["s.__cuda_stream__()"],
            "handle_int": ["int(s.handle)"],
            "wrap_protocol": ["dev.create_stream(p)"],
            "wrap_int": ["CoreStream.from_handle(H)"],
            "create_destroy": ["dev.create_stream().close()"],
            "synchronize": ["s.sync()"],
            "query": NA("cuda.core's Stream has no query()"),
        },
    ),
    Lib(
        name="CuPy",
        import_stmt="import cupy",
        version_expr="cupy.__version__",
        dists=("cupy-cuda13x", "cupy-cuda12x", "cupy"),
        setup="import cupy\ns = cupy.cuda.Stream(non_blocking=True)\nH = s.ptr\np = Producer(H)\n",
        ops={
            "cuda_stream": ["s.__cuda_stream__()"],
            "handle_int": ["s.ptr"],
            "wrap_protocol": ["cupy.cuda.Stream.from_external(p)"],
            "wrap_int": ["cupy.cuda.ExternalStream(H)"],
            "create_destroy": ["cupy.cuda.Stream(non_blocking=True)"],
            "synchronize": ["s.synchronize()"],
            "query": ["s.done"],
        },
        notes={"create_destroy": "the stream is destroyed when the object is deallocated"},
    ),
    Lib(
        name="torch",
        import_stmt="import torch",
        version_expr="torch.__version__",
        dists=("torch",),
        setup="import torch\ntorch.cuda.init()\ns = torch.cuda.Stream()\nH = s.cuda_stream\np = Producer(H)\n",
        ops={
            "cuda_stream": ["s.__cuda_stream__()"],
            "handle_int": ["s.cuda_stream"],
            "wrap_protocol": NA("torch has no __cuda_stream__ consumer (ExternalStream takes an int)"),
            "wrap_int": ["torch.cuda.ExternalStream(H)", "torch.cuda.get_stream_from_external(H)"],
            "create_destroy": ["torch.cuda.Stream()"],
            "synchronize": ["s.synchronize()"],
            "query": ["s.query()"],
        },
        notes={"create_destroy": "torch.cuda.Stream() hands out a stream from a fixed pool and never destroys it: not a create + destroy, kept out of 'best peer'"},
        not_best=("create_destroy",),
    ),
    Lib(
        name="numba",
        import_stmt="import numba.cuda",
        version_expr="__import__('importlib.metadata').metadata.version('numba-cuda')",
        dists=("numba-cuda", "numba"),
        setup="import numba.cuda\ns = numba.cuda.stream()\nH = s.__cuda_stream__()[1]\np = Producer(H)\n",
        ops={
            "cuda_stream": ["s.__cuda_stream__()"],
            "handle_int": ["s.handle.value", "int(s.handle)", "int(s)"],
            "wrap_protocol": NA("numba.cuda.external_stream takes an int, not a protocol object"),
            "wrap_int": ["numba.cuda.external_stream(H)"],
            "create_destroy": ["numba.cuda.stream()"],
            "synchronize": ["s.synchronize()"],
            "query": NA("numba's Stream has no query()"),
        },
        notes={"create_destroy": "numba queues the destroy and runs queued destroys in batches; the figure is amortized"},
    ),
    Lib(
        name="rmm",
        import_stmt="import rmm",
        version_expr="rmm.__version__",
        dists=("rmm-cu13", "rmm-cu12", "rmm"),
        setup=(
            "import rmm\nfrom rmm.pylibrmm.stream import Stream as RmmStream\n"
            "s = RmmStream()\nH = s.__cuda_stream__()[1]\np = Producer(H)\n"
        ),
        ops={
            "cuda_stream": ["s.__cuda_stream__()"],
            "handle_int": NA("rmm's Stream gives its handle as an int only through __cuda_stream__()"),
            "wrap_protocol": ["RmmStream(p)"],
            "wrap_int": NA("rmm's Stream cannot wrap an int handle from Python"),
            "create_destroy": ["RmmStream()"],
            "synchronize": ["s.synchronize()"],
            "query": NA("rmm's Stream has no query()"),
        },
        notes={"create_destroy": "the stream is destroyed when the object is deallocated"},
    ),
]

# Python-level floors, timed beside custream in the CPU run (and in the GPU run too): the
# cheapest thing CPython can do of the same shape.
FLOOR_SETUP = '''
from functools import partial
class PyStream:
    __slots__ = ("_t", "_h", "owner")
    def __init__(self, h, owner=None):
        self._t = (0, h)
        self._h = h
        self.owner = owner
    def __cuda_stream__(self):
        return self._t
    @property
    def handle(self):
        return self._h
def py_as_stream(obj):
    t = obj.__cuda_stream__()
    return PyStream(t[1], obj)
def ident(x):
    return x
def f():
    pass
i = H
py = PyStream(H)
'''

FLOORS = {
    "cuda_stream": [("Python method returning a stored tuple", "py.__cuda_stream__()"),
                    ("C method returning a stored object (int.conjugate)", "i.conjugate()")],
    "handle_int": [("Python property returning a stored int", "py.handle"),
                   ("C getter returning a stored object (int.real)", "i.real")],
    "wrap_protocol": [("pure-Python consumer, no checks", "py_as_stream(p)")],
    "wrap_int": [("plain Python class instantiation", "PyStream(H)"),
                 ("C object holding a reference (functools.partial)", "partial(f, H)")],
    "as_stream_self": [("Python identity function", "ident(s)")],
}
