"""Call overhead of a nanobind function taking custream::stream_ref (custream/nanobind.hpp),
called with a custream Stream, a torch stream and a plain __cuda_stream__ object, beside the
same function taking a uintptr_t called with an int: the caster's whole cost, per call.
Goal: a custream Stream costs at most 1.3x the uintptr_t call.

    python benches/cpp_call.py [--json PATH|-] [--number N] [--rounds R]

Builds cpp_tests/casters.cpp with nanobind (cached in cython_tests/build/) against the
installed custream. Runs without a GPU: the custream stream is Stream.from_handle; torch is
measured where torch.cuda works. Prints ns per call (best round) and the ratios.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "cpp_tests"))

import custream  # noqa: E402
from _cpp_tools import module, nanobind  # noqa: E402
from _cy_build import build  # noqa: E402

GOAL = 1.3
BASE = "uintptr_t(int)"
OURS = "stream_ref(custream.Stream)"


def load():
    nb = nanobind()
    if isinstance(nb, str):
        sys.exit(f"cpp_call: {nb} (pip install nanobind)")
    folder = str(build([module("nb_bench", "casters.cpp", lib=nb)]))
    sys.path.insert(0, folder)
    return importlib.import_module("nb_bench")


def torch_stream():
    """A torch CUDA stream, or the reason there is none."""
    try:
        import torch

        if not torch.cuda.is_available():
            return "torch.cuda is not available"
        return torch.cuda.Stream()
    except Exception as e:  # noqa: BLE001 - any failure means "not measured"
        return f"torch unavailable: {type(e).__name__}: {e}"


class Producer:
    def __cuda_stream__(self):
        return (0, 0x2000)


def measure(ext, number: int, rounds: int) -> dict:
    """ns per call of each case (the best of `rounds` rounds of `number` calls), and ratios."""
    ours = custream.Stream.from_handle(0x1000)
    cases = {BASE: (ext.handle_of_uintptr, ours.handle), OURS: (ext.handle_of, ours),
             "stream_ref(__cuda_stream__ object)": (ext.handle_of, Producer())}
    torch = torch_stream()
    if not isinstance(torch, str):
        cases["stream_ref(torch.cuda.Stream)"] = (ext.handle_of, torch)
    ns = {}
    for name, (f, arg) in cases.items():
        f(arg)  # every case must work before it is timed
        timer = timeit.Timer("f(arg)", globals={"f": f, "arg": arg})
        ns[name] = min(timer.repeat(repeat=rounds, number=number)) / number * 1e9
    return {
        "ns_per_call": {k: round(v, 1) for k, v in ns.items()},
        "ratio_to_uintptr": {k: round(v / ns[BASE], 3) for k, v in ns.items()},
        "goal_custream_ratio": GOAL,
        "torch": "measured" if not isinstance(torch, str) else torch,
        "python": sys.version.split()[0],
    }


def report(result: dict) -> str:
    ns, ratio = result["ns_per_call"], result["ratio_to_uintptr"]
    width = max(map(len, ns))
    lines = [f"{name:<{width}}  {value:8.1f} ns  {ratio[name]:5.2f}x" for name, value in ns.items()]
    if result["torch"] != "measured":
        lines.append(f"torch stream: not measured ({result['torch']})")
    verdict = "met" if ratio[OURS] <= GOAL else "MISSED"
    lines.append(f"custream Stream: {ratio[OURS]:.2f}x the uintptr_t call (goal <= {GOAL}x): {verdict}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-' for stdout)")
    parser.add_argument("--number", type=int, default=200_000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    result = measure(load(), args.number, args.rounds)
    print(report(result))
    if args.json == "-":
        print(json.dumps(result, indent=2))
    elif args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
