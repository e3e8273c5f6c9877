"""The workers' rounds as one results dict (what --json writes), and the table; run, it writes
docs/benchmarks.md's table from the stored runs (benches/results/*.json)."""

import argparse, json, re, sys
from pathlib import Path
from statistics import median

import ops

LIBRARIES = ["raw", *(p.name for p in ops.PEERS), "custream"]
PEERS, LEAST, NOT_APPLICABLE = LIBRARIES[1:-1], ops.LEAST.name, ops.NOT_APPLICABLE
NOT_BEST = " (not a create + destroy: kept out of best peer)"

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

def table(results: dict) -> str:
    names, opsd, m = results["libraries"], results["operations"], results.get("machine", {})
    head = ["operation", *names, "floor", "/best", "/raw", "target", ""]
    rows = [[o["title"] + (" [ms]" if o["unit"] == "ms" else ""),
             *["—" if (r := o["results"].get(n)) == NOT_APPLICABLE else fmt(_fig(r, o["unit"])) for n in names],
             fmt(o["floors"][-1]["ns"]) if o["floors"] else "",
             *[times(r) if r else "" for r in (o["ratio_best_peer"], o["ratio_raw"])], o["target"], o["status"]]
            for o in opsd.values()]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    out = [f"custream benchmarks{' (quick)' if results.get('settings', {}).get('quick') else ''}: median ns per call "
           "unless marked; '—' not applicable, 'n/a' see notes",
           f"{results['mode'].upper()} run: {m.get('gpu') or 'no GPU'}, driver {m.get('driver_version') or '—'}; "
           f"{m.get('cpu')}; Python {m.get('python')}; {m.get('date')}",
           ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if v), "empty timing loop (in every figure): "
           + ", ".join(f"{k} {fmt(v)}" for k, v in results.get("empty_loop_ns", {}).items()), ""]
    out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in [head, ["-" * w for w in widths], *rows]]
    for o in opsd.values():  # the least binding's statement, timed in turn in custream's worker (ops.IN_TURN)
        for f in [f for f in o["floors"] if f.get("lib") == LEAST]:
            out += ["", f"{o['title']}: {f['label']}, {f['stmt']}: {fmt(f['ns'])} ns; custream over it, per round: "
                    + " ".join(f"{r:.2f}" for r in f["ratios"]) + f"  median {f['ratio_median']:.2f}x"]
        if p := o.get("compared_to", {}).get("in_turn"):  # ops.PAIRED
            out += ["", f"{o['title']}: in turn with {p['stmt']}, per round: "
                    + " ".join(f"{r:.2f}" for r in p["ratios"]) + f"  median {p['ratio']:.2f}x; {o['target']}"
                    + (f"; the least binding's, the same way: median {p['floor_ratio']:.2f}x" if "floor_ratio" in p
                       else "")]
    cap, waits, groups = results.get("capture", {}), results.get("waits") or {}, ratio_groups(results)
    out += ["", "ratio to a C loop of the same driver calls (raw_driver.c), timed in turn",
            *(f"{label}: {note}" + "".join(f"\n    {x}" for x in lines) for label, note, lines in groups)] * bool(groups)
    for rows, title in ((cap, "capture.py: each row beside what it names, timed in turn (an indented row: a peer's)"),
                        (waits, "waits.py: median from a kernel's end to the waiter running again, and CPU used while "
                         "awaits are pending; ratio: to the driver's own wait (on another thread), same kernel")):
        out += ["", title, *once_lines(rows)] if rows and "error" not in rows and "na" not in rows else []
    notes = [f"  {x}" for x in notes_of(results)]
    return "\n".join(out + (["", "notes:", *notes] if notes else []))

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

def ratio_groups(results: dict) -> list:
    """(label, note, a line a library) per ratio row (to a C loop, timed in turn)."""
    out = []
    for key, o in results["operations"].items():
        if key not in ops.RATIO_KEYS or (mine := _fig(o["results"].get("custream"), "ratio")) is None:
            continue
        least = results.get("paired", {}).get(key, {}).get("floor", {}).get("ratio_median")  # to the C loop
        label = (f": {times(o['ratio_best_peer'])} {o['best_peer']} (best peer)" if o.get("ratio_best_peer") else "") \
            + (f", {mine / least:.2f}x least binding" if least else "")
        lines = [f"{times(least)}  least binding (floor_ext.c)"] if least else []
        lines += [f"{times(v)}  {n}" + (label if n == "custream" else NOT_BEST * bool(r.get("not_best")))
                  for n, r in o["results"].items() if (v := _fig(r, "ratio")) is not None]
        target = f"{o['target']}: {o['status']}" if o["target"] else ""
        out.append((o["title"], f"C loop {fmt(_fig(o['results']['raw']))} ns; {target}", lines))
    return out

def once_lines(rows: dict) -> list:
    """capture.py's and waits.py's rows, a line each: the figure, its ratio and what to, the target."""
    return [f"  {name}: " + (f"{r['ns'] / 1e6:.1f} ms" if r.get("unit") == "ms" else f"{fmt(r['ns'])} ns")
            + (f"  {times(r['ratio'])}" if "ratio" in r else "")
            + (f" against {r['vs']} ({fmt(r['vs_ns'])} ns)" if "vs" in r else "")
            + (f"  (<= {r['target']}x: {'pass' if r['ratio'] <= r['target'] else 'MISS'})" if r.get("target") else "")
            + (f"  (target < {r['target_ms']} ms)" if "target_ms" in r else "")
            for name, r in rows.items() if "ns" in r]

# docs/benchmarks.md's table: the newest stored run (benches/results/*.json), written between these markers by
# `python3 benches/report.py` (tests/test_bench_smoke.py fails while the page holds anything else there).
ROOT = Path(__file__).resolve().parents[1]
PAGE, RESULTS = ROOT / "docs" / "benchmarks.md", ROOT / "benches" / "results"
BEGIN = "<!-- written by python3 benches/report.py from the newest benches/results/*.json: edit neither by hand -->"
END = "<!-- end of the written table -->"

def _md(text: str) -> str:
    """Text for a Markdown table cell: *, _ and | escaped outside `code` (where a backslash is kept as written)."""
    return "".join(part.replace("|", "\\|") if i % 2 else re.sub(r"([\\*_|])", r"\\\1", part)
                   for i, part in enumerate(re.split(r"(`[^`]*`)", text)))

def _cells(key: str, o: dict, results: dict) -> list[str]:
    """One row: the C loop, the best peer, the floor (the least binding or the loop alone), custream."""
    res, unit, best = o["results"], o["unit"], o.get("best_peer")
    mine, raw, code = res.get("custream", {}), _fig(res.get("raw")), lambda r: f" `{r['stmt']}`" if "stmt" in r else ""
    if raw is not None:  # a ratio row: each library's ratio to the C loop, timed in turn with it
        least = results.get("paired", {}).get(key, {}).get("floor", {}).get("ratio_median")
        peer = f"{times(_fig(res[best], 'ratio'))} raw ({best})" if best else ""
        ratio = o.get("ratio_raw")
        me = f"{times(ratio)} raw" + (f" ({ratio / least:.2f}x the least)" if ratio and least else "") if ratio else ""
        return [fmt(raw), peer, f"{times(least)} raw" if least else "", me]
    value, suffix = _fig(mine, unit), " ms" * (unit == "ms")
    peer = f"{fmt(_fig(res[best], unit))}{suffix} ({best}{code(res[best])})" if best else ""
    floor = "; ".join(f"{fmt(f['ns'])} ({'`' + f['stmt'] + '`' if f.get('lib') == LEAST else f.get('label')})"
                      for f in o["floors"])
    extra = [f"{f['ratio_median']:.2f}x `{f['stmt']}`, in turn" for f in o["floors"] if "ratio_median" in f]
    if c := o.get("compared_to"):
        if p := c.get("in_turn"):
            extra.append(f"{p['ratio']:.2f}x `{p['stmt']}`, in turn")
        elif c.get(unit) is not None:
            name = results["operations"][c["op"]]["title"] if c["lib"] == "custream" else c["lib"]
            extra.append(f"{name}: {fmt(c[unit])}")
    me = f"{fmt(value)}{suffix}" + (f" ({'; '.join(extra)})" if extra else "") if value is not None else "n/a"
    return ["—", peer, floor, me]

def markdown(results: dict) -> str:
    """A stored run as docs/benchmarks.md shows it: the machine, a row per operation, capture's and the waits' rows
    (each beside what it names), the rows the bench has that the run lacks, and the notes."""
    m, opsd, settings = results.get("machine", {}), results["operations"], results.get("settings", {})
    drv, loop = m.get("driver_version"), results.get("empty_loop_ns", {}).get("custream")
    out = [f"{m.get('gpu') or 'No GPU'}" + (f", CUDA driver API {drv // 1000}.{drv % 1000 // 10}" if drv else "")
           + f"; {m.get('cpu')}; Python {m.get('python')}; "
           + ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if v) + ". "
           + f"Median over {settings.get('rounds', 'n/a')} rounds of fresh workers, ns per call unless marked"
           + (f"; the empty timing loop, in every figure: {fmt(loop)} ns." if loop else "."), "",
           "| operation | raw (C loop) | best peer | floor | custream | target | |", "| --- " * 7 + "|"]
    out += [f"| {_md(o['title'])} | " + " | ".join(_md(c) for c in [*_cells(k, o, results), o["target"], o["status"]])
            + " |" for k, o in opsd.items()]
    for title, rows in (("capture.py", results.get("capture") or {}), ("waits.py", results.get("waits") or {})):
        rows = {n: r for n, r in rows.items() if isinstance(r, dict) and "ns" in r}
        if rows:
            out += ["", f"| {title}: row | figure | ratio | to | target |", "| --- " * 5 + "|"]
            out += [f"| {_md(n.strip())} | " + (f"{r['ns'] / 1e6:.1f} ms" if r.get("unit") == "ms" else fmt(r["ns"]))
                    + f" | {times(r['ratio']) if 'ratio' in r else ''} | "
                    + (f"{_md(r['vs'])} ({fmt(r['vs_ns'])})" if "vs" in r else "") + " | "
                    + (f"<= {r['target']}x: {'pass' if r['ratio'] <= r['target'] else 'MISS'}" if r.get("target")
                       else f"< {r['target_ms']} ms" if "target_ms" in r else "") + " |" for n, r in rows.items()]
    if missing := [op.title for op in ops.OPERATIONS if op.key not in opsd]:
        out += ["", "Rows of the bench that this run predates: " + ", ".join(f"`{t}`" for t in missing) + "."]
    return "\n".join(out + ["", "Notes:", "", *(f"- {_md(n)}" for n in notes_of(results))] * bool(notes_of(results)))

def newest(paths) -> dict:
    """The stored run to show: the newest GPU run, by its date."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    return max(runs, key=lambda r: (r.get("mode") == "gpu", r.get("machine", {}).get("date", "")))

def page(text: str) -> str:
    """The page's text with the written table made again from the stored runs."""
    head, sep, rest = text.partition(BEGIN)
    if not sep or END not in rest:
        raise ValueError(f"{PAGE.name} has no {BEGIN!r} ... {END!r} block")
    return f"{head}{BEGIN}\n\n{markdown(newest(sorted(RESULTS.glob('*.json'))))}\n\n{END}{rest.partition(END)[2]}"

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Write docs/benchmarks.md's table from benches/results/*.json.")
    ap.add_argument("--check", action="store_true", help="write nothing: exit 1 if the page's table is stale")
    old = PAGE.read_text()
    if ap.parse_args().check:
        sys.exit(0 if page(old) == old else f"{PAGE} is stale: run python3 benches/report.py")
    PAGE.write_text(page(old))
