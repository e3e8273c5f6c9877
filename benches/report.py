"""The workers' rounds as one results dict (what --json writes), the table and the chart."""

import textwrap
from statistics import median

import ops

LIBRARIES = ["raw", *(p.name for p in ops.PEERS), "custream"]
PEERS, LEAST, NOT_APPLICABLE = LIBRARIES[1:-1], ops.LEAST.name, {"na": "not applicable"}

def _fig(entry, unit: str = "ns") -> float | None:
    return entry.get(unit) if isinstance(entry, dict) else None

def combine(entries: list[dict]) -> dict:
    """One library's figures for one operation over the rounds: the median and spread, and
    where it was timed in turn with raw_driver.c's loop, each round's ratio and their median."""
    unit = "ms" if any("ms" in e for e in entries) else "ns"
    if not (good := [e for e in entries if unit in e]):
        return entries[0] if entries else {"na": "not measured"}
    v = [e[unit] for e in good]
    out = {k: good[0][k] for k in ("stmt", "note", "not_best") if k in good[0]}
    out.update({unit: median(v), f"min_{unit}": min(v), f"max_{unit}": max(v), "rounds": len(v),
                f"per_round_{unit}": v})
    if "ratio" in good[0]:
        out.update(ratio=median(e["ratio"] for e in good), ratios=[e["ratio"] for e in good],
                   raw_ns=[e["raw_ns"] for e in good])
    return out

def assemble(mode: str, rounds: dict, cython: dict) -> dict:
    """rounds: per library, its workers' outputs, one a round; cython: the Cython worker's figures."""
    errors = {n: ws[0]["error"] for n, ws in rounds.items() if ws and all("error" in w for w in ws)}
    figures = {n: {k: combine([w["ops"][k] for w in ws if k in w.get("ops", {})]) for k in ops.OPS}
               for n, ws in rounds.items()}
    out: dict = {"schema": 2, "mode": mode, "libraries": LIBRARIES, "operations": {}, "paired": {},
                 "lib_errors": errors,
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
        if op.load:  # a field load adds well under a nanosecond to the loop; any call adds more
            res = {n: cython.get(n, {"na": "not measured"}) if n in ("custream", "rmm") else NOT_APPLICABLE
                   for n in LIBRARIES}
            if floor := _fig(cython.get("floor")):
                floors = [{"label": cython["floor"]["label"], "ns": floor, "stmt": "nogil loop, barrier only"}]
            limit = floor + 1 if floor and cython.get("generated_c_reads_field") else None
        elif op.raw is not None:  # the C loop: its median over the rounds, timed in turn with custream
            res["raw"] = ({"ns": median(mine["raw_ns"])} if "raw_ns" in mine
                          else {"na": "timed with --gpu only" if mode != "gpu" else "not measured"})
            if "ratios" in mine:
                out["paired"][op.key] = {**series(mine), "raw_ns": mine["raw_ns"], "custream_ns": mine["per_round_ns"],
                                         **({"floor": series(least)} if "ratios" in least else {}),
                                         "peers": {n: series(fig[n]) for n in PEERS if "ratios" in fig.get(n, {})}}
        elif "ns" in least:  # the least binding's figure on a row without a C loop: a floor beside custream's
            floors = [{"label": "least binding (floor_ext.c)", "lib": LEAST, "ns": least["ns"], "stmt": least["stmt"]}]
        unit = "ratio" if op.raw is not None else op.unit  # a ratio row's peers compare on their ratio to raw
        value = _fig(res["custream"], unit)
        peers = {n: v for n in PEERS if (v := _fig(res[n], unit)) is not None and not res[n].get("not_best")}
        best = min(peers, key=peers.get) if peers else None
        row = out["operations"][op.key] = {
            "title": op.title, "unit": op.unit, "target": op.target, "results": res, "floors": floors,
            "best_peer": best, "ratio_best_peer": value / peers[best] if best and value else None,
            "ratio_raw": _fig(res["custream"], "ratio")}
        if op.load:
            row.update(floor_ns=floor, generated_c_reads_field=cython.get("generated_c_reads_field"))
        elif op.times is not None:  # against another figure of the same run
            factor, lib, key = op.times
            other = _fig(figures.get(lib, {}).get(key, {}), op.unit)
            row["compared_to"], limit = {"lib": lib, "op": key, op.unit: other}, other and factor * other
        row["status"] = ("needs GPU" if op.gpu and mode != "gpu" else "" if not op.target  # no target: to compare with
                         else "n/a" if value is None or (limit is None and not op.load)
                         else "pass" if limit is not None and value <= limit else "MISS")
    return out

def fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"

def times(r: float) -> str:
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"

def _versions(machine: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in machine.get("versions", {}).items() if v)

def human(v: float, unit: str) -> str:
    """A scale figure: ns as ns, µs or ms; calls/s as M calls/s."""
    if unit == "calls/s":
        return f"{v / 1e6:.1f} M calls/s"
    return f"{fmt(v)} ns" if v < 1e4 else f"{fmt(v / 1e3)} µs" if v < 1e6 else f"{fmt(v / 1e6)} ms"

def table(results: dict) -> str:
    """The operations, a column a library; each round's ratio to the C loops; capture.py's and
    scale.py's rows (as the chart draws them); the notes."""
    names, opsd, m = results["libraries"], results["operations"], results.get("machine", {})
    head = ["operation", *names, "floor", "/best", "/raw", "target", ""]
    ratio = lambda r: f"{r:.2f}x" if r else ""  # noqa: E731
    rows = [[o["title"] + (" [ms]" if o["unit"] == "ms" else ""),
             *["—" if (r := o["results"].get(n)) == NOT_APPLICABLE else fmt(_fig(r, o["unit"])) for n in names],
             fmt(o["floors"][-1]["ns"]) if o["floors"] else "", ratio(o["ratio_best_peer"]), ratio(o["ratio_raw"]),
             o["target"], o["status"]] for o in opsd.values()]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    quick = ", quick" if results.get("settings", {}).get("quick") else ""
    out = [f"custream benchmarks ({results['mode'].upper()} run{quick}): median ns per call unless marked; "
           "'—' not applicable, 'n/a' see notes",
           f"machine: {m.get('gpu') or 'no GPU'}, driver {m.get('driver_version') or '—'}; {m.get('cpu')}; "
           f"Python {m.get('python')}", "versions: " + _versions(m),
           "empty timing loop (in every figure): "
           + ", ".join(f"{k} {fmt(v)}" for k, v in results.get("empty_loop_ns", {}).items()), ""]
    out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in [head, ["-" * w for w in widths], *rows]]
    for o in opsd.values():  # the least binding's figure where no C loop is timed
        for f in [f for f in o["floors"] if f.get("lib") == LEAST and _fig(o["results"]["custream"])]:
            out += ["", f"{o['title']}: least binding ({f['stmt']}) {fmt(f['ns'])} ns; custream over it: "
                        f"{o['results']['custream']['ns'] / f['ns']:.2f}x"]
    ratios = lambda e: " ".join(f"{r:.2f}" for r in e["ratios"]) + f"  median {e['ratio_median']:.2f}x"  # noqa: E731
    for key, e in results.get("paired", {}).items():
        out += ["", f"{opsd[key]['title']}, ratio to raw_driver.c's loop timed in turn, per round: {ratios(e)}"]
        out += [f"    least binding ({e['floor']['stmt']}): {ratios(e['floor'])}; custream over it: "
                f"{e['ratio_median'] / e['floor']['ratio_median']:.2f}x"] if "floor" in e else []
        out += [f"    {n} ({p['stmt']}): {ratios(p)}" for n, p in e.get("peers", {}).items()]
    cap, scale = results.get("capture", {}), results.get("scale") or {}
    out += ["", "host functions and capture (capture.py): " + cap["error"]] if "error" in cap else []
    for name, r in ({} if "error" in cap else cap).items():
        verdict = f"  <= {r['target']}x: " + ("pass" if r["ratio"] <= r["target"] else "MISS") if r["target"] else ""
        out += [f"{name:<40} {fmt(r['ns']):>9} ns   {r['vs']:<26} {fmt(r['vs_ns']):>9} ns  {r['ratio']:.2f}x{verdict}"]
    out += ["", f"scale rows (scale.py; driver: {scale.get('driver', '?')}): a figure per size N; growth: the last "
            f"size's figure over the first's", *([f"  {scale['error']}"] if "error" in scale else [])] if scale else []
    out += [f"{g['label']}: {g['note']}" + "".join(f"\n    {b['text']}" for b in g["bars"])
            for g in groups(results)["scale"]]
    notes = [f"  {x}" for x in results.get("round_errors", [])]
    for o in opsd.values():
        for n, r in o["results"].items():
            if n not in results.get("lib_errors", {}):
                quiet = [None, "not applicable", "needs a GPU (run with --gpu)", *["not measured"] * (not o["status"])]
                label = r.get("label") if o["title"] == "Cython handle read" else None
                notes += [f"  {n} / {o['title']}: {what}" for what in (r.get("na") not in quiet and f"n/a: {r['na']}",
                                                                        r.get("note"), label) if what]
    notes += [f"  {n}: {e}" for n, e in results.get("lib_errors", {}).items() if e != "peers are measured with --gpu"]
    return "\n".join(out + (["", "notes:", *notes] if notes else []))

COLORS = {"raw": "#555555", "least binding": "#9a9a9a", "cuda.core": "#76b900", "CuPy": "#1f77b4", "torch": "#ee4c2c",
          "numba": "#00a3e0", "rmm": "#7f4fc9", "custream": "#f2a900"}
REFERENCE = "#d0d0d0"  # a floor or reference figure of custream's own (hatched)
SHADES = ["#fbe3a6", "#f6c453", "#f2a900"]  # custream's colour in a scale row: the first size lightest, the last full

def _bar(lib: str, value: float, text: str, ref: bool = False, color: str | None = None) -> dict:
    return {"lib": lib, "value": value, "text": text, "ref": ref, "color": color}

def groups(results: dict) -> dict:
    """Per panel of the chart ("ns", "ratio": the rows timed in turn with a C loop, "ms",
    "scale"), its groups of bars, a group a row. A row another of custream's rows is compared
    with is drawn there, as its hatched reference; floors are hatched too. custream's bar is
    labelled with its ratio to the best peer and the least binding, whose bar comes first."""
    opsd, panels = results["operations"], {"ns": [], "ratio": [], "ms": [], "scale": []}
    referenced = {o["compared_to"]["op"] for o in opsd.values() if o.get("compared_to", {}).get("lib") == "custream"}
    for key, o in opsd.items():
        ratio = (op := ops.OPS.get(key)) is not None and op.raw is not None
        unit, show = ("ratio", times) if ratio else (o["unit"], fmt)
        least = (results.get("paired", {}).get(key, {}).get("floor", {}).get("ratio_median") if ratio
                 else next((f["ns"] for f in o["floors"] if f.get("lib") == LEAST), None))
        mine = _fig(o["results"].get("custream"), unit)
        if op is None or (key in referenced and not ratio) or mine is None:
            continue
        label = (f": {times(o['ratio_best_peer'])} {o['best_peer']} (best peer)" if o.get("ratio_best_peer") else "") \
            + (f", {mine / least:.2f}x least binding" if least else "")
        bars = [_bar(LEAST, least, f"{show(least)}  least binding (floor_ext.c)")] if least else []
        for n in results["libraries"]:
            if (v := _fig(o["results"].get(n), unit)) is not None:
                odd = " (not a create + destroy: kept out of best peer)" if o["results"][n].get("not_best") else ""
                bars.append(_bar(n, v, f"{show(v)}  custream{label}" if n == "custream" else f"{show(v)}  {n}{odd}"))
        bars += [_bar("floor", f["ns"], f"{fmt(f['ns'])}  floor: {f['label']}", ref=True) for f in o["floors"]
                 if f.get("ns") and "lib" not in f]
        target, cmp = op.raw if ratio else op.bound, o.get("compared_to")
        if cmp and cmp.get("ns"):
            target = op.times[0] * cmp["ns"]
            if cmp["lib"] == "custream":
                text = f"{fmt(cmp['ns'])}  reference: {ops.OPS[cmp['op']].title}"
                bars.append(_bar("reference", cmp["ns"], text, ref=True))
        note = (f"C loop {fmt(_fig(o['results']['raw']))} ns; " if ratio else "") + (
            f"{o['target']}: {o['status']}" if o["target"] else "")
        panels["ratio" if ratio else unit].append({"label": o["title"], "bars": bars, "target": target, "note": note})
    # capture.py's rows: against a C loop as ratios to it (a main row, then its peers' rows, "  CuPy ..."),
    # against a peer in milliseconds
    cap = results.get("capture", {})
    for name, r in ({} if "error" in cap else cap).items():
        if not r["vs"].startswith("C "):
            peer, ms, mine = r["vs"].split()[0], r["vs_ns"] / 1e6, r["ns"] / 1e6
            panels["ms"].append({"label": name.replace(" (custream)", ""), "note": f"against {r['vs']}", "target": None,
                                 "rows": "capture", "bars": [_bar(peer, ms, f"{fmt(ms)}  {peer}"), _bar(
                                     "custream", mine, f"{fmt(mine)}  custream: {times(r['ratio'])} {peer}")]})
            continue
        lib = next((n for n in COLORS if name.strip().startswith(n)), None) if name.startswith(" ") else "custream"
        if lib == "custream" or not panels["ratio"] or panels["ratio"][-1].get("rows") != "capture":
            note = f"{r['vs']} {fmt(r['vs_ns'])} ns" + (f"; <= {r['target']}x" if r["target"] else "")
            panels["ratio"].append({"label": name.strip(), "bars": [], "target": r["target"], "note": note,
                                    "rows": "capture"})
        text = f"{times(r['ratio'])}  {lib}" + (f" ({fmt(r['ns'])} ns)" if lib == "custream" else "")
        panels["ratio"][-1]["bars"].append(_bar(lib or name.strip(), r["ratio"], text))
    # scale.py's rows, as ns per call (per kernel; threads: the wall time per call, all threads together), a bar a size
    for r in (results.get("scale") or {}).get("rows", []):
        bars = []
        for i, p in enumerate(r.get("points", [])):
            v = 1e9 / p["value"] if r["unit"] == "calls/s" else p["value"] / (p["n"] if r["per"] else 1)
            text = (f"{p['n']:,} thread{'s' * (p['n'] > 1)}: {human(p['value'], r['unit'])} ({human(v, 'ns')} a call)"
                    if r["unit"] == "calls/s" else f"N={p['n']:,}: {human(p['value'], r['unit'])}"
                    + (f" ({human(v, 'ns')} a {r['per']})" if r["per"] else ""))
            bars.append(_bar("custream", v, text, color=SHADES[2 if i == len(r["points"]) - 1 else min(i, 1)]))
            if "raw_ns" in p:
                bars.append(_bar("raw", p["raw_ns"], f"N={p['n']:,}: {human(p['raw_ns'], 'ns')}  raw_driver.c"))
        raw = f"; raw_driver.c {r['raw_growth']:.2f}x" if "raw_growth" in r else ""
        per = f" per {r['per']}" if r.get("per") else ""
        note = r.get("error") or f"growth{per} {r['growth']:.2f}x (expect {r['expect']}){raw}"
        panels["scale"].append({"label": r["title"], "bars": bars, "target": None, "rows": "scale", "note": note})
    return panels

def plot(results: dict, path: str) -> None:
    """One panel per unit, horizontal bars: ns per call; ratio to the C loop (timed in turn);
    milliseconds; the scale rows. custream's bar is outlined and labelled with its ratio to
    the best peer; floors and references hatched; targets dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    m, panels = results.get("machine", {}), groups(results)
    panels = [(title, [g for g in panels[key] if g["bars"]], key != "ratio") for key, title in [
        ("ns", "ns per call (log scale)"),
        ("ratio", "ratio to the driver calls in a C loop (raw_driver.c = 1, the grey line), timed in turn"),
        ("ms", "milliseconds (log scale): import in a fresh interpreter; capture against a peer"),
        ("scale", "scale rows (scale.py), log scale: ns a call at each size N; capture: ns a kernel; threads: the wall "
         "time a call,\nall threads together; growth: the last size's figure over the first's. "
         f"Driver: {(results.get('scale') or {}).get('driver')}")] if any(g["bars"] for g in panels[key])]
    slots = [sum(len(g["bars"]) + 1.2 for g in groups) for _, groups, _ in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, 2.2 + 0.24 * sum(slots) + 0.8 * len(panels)),
                             gridspec_kw={"height_ratios": slots}, squeeze=False)
    drawn: set = set()  # what the legend lists
    for ax, (title, groups_, log) in zip(axes[:, 0], panels):  # a group of bars a row, top to bottom
        y, ticks, labels, values = 0.0, [], [], []
        for g in groups_:
            top = y
            for b in g["bars"]:  # each bar's text at its end
                mine = b["lib"] == "custream"
                color = b["color"] or (REFERENCE if b["ref"] else COLORS.get(b["lib"], "#999999"))
                ax.barh(y, b["value"], 0.8, color=color, hatch="//" if b["ref"] else None,
                        edgecolor="black" if mine or b["ref"] else "none", linewidth=0.8)
                ax.annotate(b["text"], (b["value"], y), xytext=(4, 0), textcoords="offset points", va="center",
                            zorder=5, fontsize=8.5, fontweight="bold" if mine and not b["color"] else "normal",
                            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.85})
                drawn.add("floor / reference" if b["ref"] else b["lib"])
                values.append(b["value"])
                y += 1
            if g["target"]:
                ax.vlines(g["target"], top - 0.5, y - 0.5, colors="black", linestyles="dashed", linewidth=1.2)
            ticks.append((top + y - 1) / 2)
            labels.append("\n".join(textwrap.wrap(g["label"], 40)) + (f"\n{g['note']}" if g.get("note") else ""))
            ax.axhline(y + 0.1, color="#e4e4e4", linewidth=0.8)
            y += 1.2
        ax.set_yticks(ticks, labels, fontsize=9)
        ax.set_ylim(y - 1.1, -0.8)
        if log:
            ax.set_xscale("log")
            ax.set_xlim(min(values) / 2, max(values) * 40)
        else:  # the ratio panel: the C loop at 1
            ax.axvline(1.0, color="#555555", linewidth=1.2)
            ax.set_xlim(0, max(max(values) * 1.35, 4))
        ax.grid(axis="x", which="major", alpha=0.3)
        ax.tick_params(axis="y", length=0)
        ax.set_title(title, loc="left", fontsize=10.5, fontweight="bold")
    handles = [Patch(facecolor=COLORS[n], edgecolor="black" if n == "custream" else "none", label=n)
               for n in COLORS if n in drawn]
    handles += [Patch(facecolor=REFERENCE, hatch="//", edgecolor="black", label="floor / reference")] * (
        "floor / reference" in drawn)
    handles += [Line2D([], [], color="black", linestyle="dashed", label="target")]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=9, frameon=False,
               bbox_to_anchor=(0.5, 1.0))
    fig.text(0.5, 0.003, f"{results['mode'].upper()} run: {m.get('gpu') or 'no GPU'}; {m.get('cpu')}; "
             f"Python {m.get('python')}; {m.get('date')}\n{_versions(m)}\nbars: medians, over rounds of fresh "
             "processes (capture and scale rows: one process); custream's outlined, labelled with its ratio to the "
             "best peer", ha="center", va="bottom", fontsize=8.5)
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight(), 1, 1 - 0.35 / fig.get_figheight()))
    fig.savefig(path, dpi=110)
    plt.close(fig)
