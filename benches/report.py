"""The workers' rounds as one results dict (what --json writes), and the table; run, it writes
docs/benchmarks.md's table from the stored runs (benches/results/*.json)."""

import json, re
from pathlib import Path
from statistics import median

import ops

LIBRARIES = ["raw", *(p.name for p in ops.PEERS), "custream"]
PEERS, LEAST, NOT_APPLICABLE = LIBRARIES[1:-1], ops.LEAST.name, ops.NOT_APPLICABLE

def _fig(entry, unit: str = "ns") -> float | None:
    return entry.get(unit) if isinstance(entry, dict) else None

def combine(entries: list[dict]) -> dict:
    unit = "ms" if any("ms" in e for e in entries) else "ns"
    if not (good := [e for e in entries if unit in e]):
        return entries[0] if entries else {"na": "not measured"}
    each = lambda key: [e[key] for e in good]  # noqa: E731
    out = {**{k: good[0][k] for k in ("stmt", "note", "not_best") if k in good[0]},
           unit: median(each(unit)), f"per_round_{unit}": each(unit)}
    if "ratio" in good[0]:
        out.update(ratio=median(each("ratio")), ratios=each("ratio"))
        out.update({"raw_ns": each("raw_ns")} if "raw_ns" in good[0] else {})
    if "least" in good[0]:
        out["least"] = combine(each("least"))
    if "paired" in good[0]:  # ops.PAIRED: the ratio to the row its target names, per round
        ratios, floors = [p["ratio"] for p in each("paired")], [p.get("floor_ratio") for p in each("paired")]
        out["paired"] = {"stmt": good[0]["paired"]["stmt"], "ratio": median(ratios), "ratios": ratios,
                         **({"floor_ratio": median(floors), "floor_ratios": floors} if None not in floors else {})}
    return out

def assemble(mode: str, rounds: dict, cython: dict) -> dict:
    """rounds: per library, its workers' outputs, one a round; cython: the Cython worker's figures."""
    errors = {n: ws[0]["error"] for n, ws in rounds.items() if ws and all("error" in w for w in ws)}
    figures = {n: {k: combine([w["ops"][k] for w in ws if k in w.get("ops", {})]) for k in ops.OPS}
               for n, ws in rounds.items()}
    out = {"schema": 2, "mode": mode, "libraries": LIBRARIES, "operations": {}, "paired": {}, "lib_errors": errors,
           "round_errors": sorted({f"{n}: {w['error']}" for n, ws in rounds.items() if n not in errors
                                   for w in ws if "error" in w}),
           "empty_loop_ns": {n: median(w["empty_loop"]["ns"] for w in ws if "empty_loop" in w)
                             for n, ws in rounds.items() if any("empty_loop" in w for w in ws)}}
    series = lambda f: {"stmt": f["stmt"], "ratios": f["ratios"], "ratio_median": f["ratio"]}  # noqa: E731
    for op in ops.OPERATIONS:
        fig = {n: fs[op.key] for n, fs in figures.items()}
        mine, least = fig.get("custream", {}), fig.get(LEAST, {})
        res = {n: {"na": errors[n]} if n in errors else fig.get(n, {"na": "not measured"}) for n in LIBRARIES}
        res["raw"], floors, limit = NOT_APPLICABLE, [], op.bound if op.bound is not None else op.raw
        if op.load:  # a field load adds well under a nanosecond to the loop (the floor's); any call adds more
            res = {n: cython.get(n, NOT_APPLICABLE) for n in LIBRARIES}
            floors = [cython["floor"]] if "floor" in cython else []
            limit = floors[0]["ns"] + 1 if floors and cython.get("generated_c_reads_field") else None
        elif op.raw is not None:  # the C loop: its median over the rounds, timed in turn with custream's
            res["raw"] = {"ns": median(mine["raw_ns"])} if "raw_ns" in mine else {"na": "not measured"}
            if "ratios" in least:  # the least binding's ratios (custream's and the peers': in their results)
                out["paired"][op.key] = {"floor": series(least)}
        elif "least" in mine:  # ops.IN_TURN: the least binding's statement, timed in turn in custream's worker
            f = mine.pop("least")
            floors = [{"label": "least binding (floor_ext.c), in turn in custream's worker", "lib": LEAST,
                       "ns": f["ns"], **series(f)}]
        unit = "ratio" if op.raw is not None else op.unit  # a ratio row's peers compare on their ratio to raw
        value = _fig(res["custream"], unit)
        peers = {n: v for n in PEERS if (v := _fig(res[n], unit)) is not None and not res[n].get("not_best")}
        best = min(peers, key=peers.get) if peers else None
        row = out["operations"][op.key] = {
            "title": op.title, "unit": op.unit, "target": op.target, "results": res, "floors": floors,
            "best_peer": best, "ratio_best_peer": value / peers[best] if best and value else None,
            "ratio_raw": _fig(res["custream"], "ratio"),
            **({"generated_c_reads_field": cython.get("generated_c_reads_field")} if op.load else {})}
        if op.times is not None:  # against another figure of the same run
            factor, lib, key = op.times
            other = _fig(figures.get(lib, {}).get(key, {}), op.unit)
            row["compared_to"], limit = {"lib": lib, "op": key, op.unit: other}, other and factor * other
            if "paired" in mine:  # timed in turn with it (ops.PAIRED): the verdict takes the ratio per pair
                row["compared_to"]["in_turn"] = mine["paired"]
                value, limit = mine["paired"]["ratio"], factor
        row["status"] = ("needs GPU" if op.gpu and mode != "gpu" else "" if not op.target  # no target: to compare with
                         else "n/a" if value is None or (limit is None and not op.load)
                         else "pass" if limit is not None and value <= limit else "MISS")
    return out

def fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"

def times(r: float) -> str:
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"

def heading(results: dict) -> list[str]:
    m, settings = results.get("machine", {}), results.get("settings", {})
    drv = m.get("driver_version")
    return [f"custream benchmarks, {results['mode'].upper()} run{' (quick)' * bool(settings.get('quick'))}: "
            + (m.get("gpu") or "no GPU") + (f", CUDA driver API {drv // 1000}.{drv % 1000 // 10}" if drv else "")
            + f"; {m.get('cpu')}; Python {m.get('python')}; {m.get('date')}; "
            + ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if v) + ".",
            f"Median over {settings.get('rounds', 'n/a')} rounds of fresh workers, ns per call unless marked; "
            "a ratio row (raw: a C loop of the same driver calls, raw_driver.c): each library's figure and, in "
            "parentheses, its median ratio to the C loop timed in turn with it; '—': not applicable; 'n/a': see the "
            "notes; *: kept out of best peer; the empty timing loop, in every figure: "
            + ", ".join(f"{k} {fmt(v)}" for k, v in results.get("empty_loop_ns", {}).items()) + "."]

def op_rows(results: dict) -> list[list[str]]:
    """A row per operation (heading()'s legend): each library's figure, the floor (a ratio row's: the least binding's
    ratio), custream over the best peer, the target and its verdict."""
    def cell(r, unit: str) -> str:
        ratio = _fig(r, "ratio")
        return "—" if r == NOT_APPLICABLE else (fmt(_fig(r, unit)) + (f" ({times(ratio)})" if ratio else "")
                                                + "*" * bool(r and r.get("not_best")))
    names = results["libraries"]
    rows = [["operation", *names, "floor", "/best peer", "target", ""]]
    for key, o in results["operations"].items():
        least = results.get("paired", {}).get(key, {}).get("floor", {}).get("ratio_median")  # to the C loop
        rows.append([o["title"] + " [ms]" * (o["unit"] == "ms"), *[cell(o["results"].get(n), o["unit"]) for n in names],
                     times(least) if least else fmt(o["floors"][-1]["ns"]) if o["floors"] else "",
                     f"{times(o['ratio_best_peer'])} {o['best_peer']}" if o["ratio_best_peer"] else "", o["target"],
                     o["status"]])
    return rows

def in_turn_lines(results: dict) -> list[str]:
    """The rows timed in turn in custream's worker: beside the least binding (ops.IN_TURN), beside another row of
    custream's that their target names (ops.PAIRED)."""
    out, each = [], lambda ratios: " ".join(f"{r:.2f}" for r in ratios)  # noqa: E731
    for o in results["operations"].values():
        out += [f"{o['title']}: {f['label']}, {f['stmt']}: {fmt(f['ns'])} ns; custream over it, per round: "
                f"{each(f['ratios'])}  median {f['ratio_median']:.2f}x" for f in o["floors"] if f.get("lib") == LEAST]
        if p := o.get("compared_to", {}).get("in_turn"):
            out.append(f"{o['title']}: in turn with {p['stmt']}, per round: {each(p['ratios'])}"
                       f"  median {p['ratio']:.2f}x; {o['target']}"
                       + (f"; the least binding's, the same way: median {p['floor_ratio']:.2f}x" if "floor_ratio" in p
                          else ""))
    return out

def once_rows(rows: dict) -> list[list[str]]:
    """capture.py's or waits.py's rows: the figure, its ratio and what to, the target (a ratio or ms) and verdict."""
    out = [["row", "figure", "ratio", "to", "target", ""]]
    for name, r in rows.items():
        if isinstance(r, dict) and "ns" in r:
            limit, value, unit = ((r["target"], r["ratio"], "x") if r.get("target")
                                  else (r.get("target_ms"), r["ns"] / 1e6, " ms"))
            out.append([name, f"{r['ns'] / 1e6:.1f} ms" if r.get("unit") == "ms" else fmt(r["ns"]),
                        times(r["ratio"]) if "ratio" in r else "",
                        f"{r['vs']} ({fmt(r['vs_ns'])})" if "vs" in r else "",
                        f"<= {limit}{unit}" if limit else "", ("pass" if value <= limit else "MISS") if limit else ""])
    return out if len(out) > 1 else []

def notes_of(results: dict) -> list[str]:
    """Why a figure is missing or what it means: a worker's error, a library's, a row's n/a or note."""
    errors, quiet = results.get("lib_errors", {}), (None, "not applicable", "not measured", ops.NEEDS_GPU)
    cap, waits = results.get("capture", {}), results.get("waits") or {}
    notes = [*results.get("round_errors", []), *(f"{n}: {e}" for n, e in errors.items())]
    notes += [f"{n}.py: {x['error']}" for n, x in (("capture", cap), ("waits", waits)) if "error" in x]
    notes += [f"capture.py / {n}: {r['error']}" for n, r in cap.items() if isinstance(r, dict) and "error" in r]
    return notes + [f"{n} / {o['title']}: {what}" for o in results["operations"].values()
                    for n, r in o["results"].items() if n not in errors
                    for what in (r.get("na") not in quiet and f"n/a: {r['na']}", r.get("note")) if what]

def _md(text: str) -> str:
    """Text for Markdown: \\, *, _ and | escaped."""
    return re.sub(r"([\\*_|])", r"\\\1", text)

def render(results: dict, md: bool = False) -> str:
    """The run as the terminal shows it (columns aligned), or as Markdown (docs/benchmarks.md's): the heading, then
    each of these sections that has rows."""
    missing = ", ".join(op.title for op in ops.OPERATIONS if op.key not in results["operations"])
    sections = [
        ("", op_rows(results)),
        ("rows timed in turn with another statement, each round", in_turn_lines(results)),
        ("capture.py: each row beside what it names, timed in turn (an indented row: a peer's)",
         once_rows(results.get("capture") or {})),
        ("waits.py: median from a kernel's end to the waiter running again, and CPU used while waits are pending; "
         "ratio: to the driver's own wait (on another thread), same kernel", once_rows(results.get("waits") or {})),
        ("rows of the bench that this run predates", [missing] * bool(missing)),
        ("notes", notes_of(results))]
    esc = _md if md else str
    out = [esc(x) for x in heading(results)]
    for caption, rows in [s for s in sections if s[1]]:
        out += ["", f"{esc(caption)}:", *[""] * md] if caption else [""]  # Markdown: a table is a block of its own
        if isinstance(rows[0], str):  # lines
            out += [f"- {_md(x)}" if md else f"  {x}" for x in rows]
        elif md:
            out += ["| " + " | ".join(_md(c.strip()) for c in r) + " |"
                    for r in [rows[0], ["---"] * len(rows[0]), *rows[1:]]]
        else:
            widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
            out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                    for r in [rows[0], ["-" * w for w in widths], *rows[1:]]]
    return "\n".join(out)

# docs/benchmarks.md's table: the newest stored run (benches/results/*.json), written between these markers by
# `python3 benches/report.py` (tests/test_bench_smoke.py fails while the page holds anything else there).
ROOT = Path(__file__).resolve().parents[1]
PAGE, RESULTS = ROOT / "docs" / "benchmarks.md", ROOT / "benches" / "results"
BEGIN = "<!-- written by python3 benches/report.py from the newest benches/results/*.json: edit neither by hand -->"
END = "<!-- end of the written table -->"

def newest(paths) -> dict:
    """The stored run to show: the newest GPU run, by its date."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    return max(runs, key=lambda r: (r.get("mode") == "gpu", r.get("machine", {}).get("date", "")))

def page(text: str) -> str:
    """The page's text with the written table made again from the stored runs."""
    head, sep, rest = text.partition(BEGIN)
    if not sep or END not in rest:
        raise ValueError(f"{PAGE.name} has no {BEGIN!r} ... {END!r} block")
    table = render(newest(sorted(RESULTS.glob("*.json"))), md=True)
    return f"{head}{BEGIN}\n\n{table}\n\n{END}{rest.partition(END)[2]}"

if __name__ == "__main__":
    PAGE.write_text(page(PAGE.read_text()))
