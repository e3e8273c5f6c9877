"""The workers' rounds as one results dict (what --json writes), the table and the chart."""

import textwrap
from collections import namedtuple
from statistics import median

import ops

LIBRARIES = ["raw", *(p.name for p in ops.PEERS), "custream"]
PEERS, LEAST, NOT_APPLICABLE = LIBRARIES[1:-1], ops.LEAST.name, ops.NOT_APPLICABLE
COLORS = {"raw": "#555555", "least binding": "#9a9a9a", "cuda.core": "#76b900", "CuPy": "#1f77b4", "torch": "#ee4c2c",
          "numba": "#00a3e0", "rmm": "#7f4fc9", "custream": "#f2a900"}
Bar = namedtuple("Bar", "lib value text ref", defaults=(False,))  # ref: a floor of custream's own (hatched)
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
        row["status"] = ("needs GPU" if op.gpu and mode != "gpu" else "" if not op.target  # no target: to compare with
                         else "n/a" if value is None or (limit is None and not op.load)
                         else "pass" if limit is not None and value <= limit else "MISS")
    return out

def fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"

def times(r: float) -> str:
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"

def machine(results: dict) -> str:
    m = results.get("machine", {})
    return (f"{results['mode'].upper()} run: {m.get('gpu') or 'no GPU'}, driver {m.get('driver_version') or '—'}; "
            f"{m.get('cpu')}; Python {m.get('python')}; {m.get('date')}\n"
            + ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if v))

def table(results: dict) -> str:
    names, opsd, panels = results["libraries"], results["operations"], groups(results)
    head = ["operation", *names, "floor", "/best", "/raw", "target", ""]
    rows = [[o["title"] + (" [ms]" if o["unit"] == "ms" else ""),
             *["—" if (r := o["results"].get(n)) == NOT_APPLICABLE else fmt(_fig(r, o["unit"])) for n in names],
             fmt(o["floors"][-1]["ns"]) if o["floors"] else "",
             *[times(r) if r else "" for r in (o["ratio_best_peer"], o["ratio_raw"])], o["target"], o["status"]]
            for o in opsd.values()]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    out = [f"custream benchmarks{' (quick)' if results.get('settings', {}).get('quick') else ''}: median ns per call "
           "unless marked; '—' not applicable, 'n/a' see notes",
           machine(results), "empty timing loop (in every figure): "
           + ", ".join(f"{k} {fmt(v)}" for k, v in results.get("empty_loop_ns", {}).items()), ""]
    out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in [head, ["-" * w for w in widths], *rows]]
    for o in opsd.values():  # the least binding's statement, timed in turn in custream's worker (ops.IN_TURN)
        for f in [f for f in o["floors"] if f.get("lib") == LEAST]:
            over = (f"; custream over it, per round: {' '.join(f'{r:.2f}' for r in f['ratios'])}  median "
                    f"{f['ratio_median']:.2f}x" if "ratios" in f else " (in a worker of its own)")
            out += ["", f"{o['title']}: {f['label']}, {f['stmt']}: {fmt(f['ns'])} ns{over}"]
    cap, scale, waits = results.get("capture", {}), results.get("scale") or {}, results.get("waits") or {}
    for key, head in (("ratio", "ratio to a C loop of the same driver calls (raw_driver.c), timed in turn; "
                                "capture.py's rows: to the loop each names"),
                      ("scale", f"scale rows (scale.py; driver: {scale.get('driver')}): a figure per size N; growth: "
                                "the last size's figure over the first's")):
        out += ["", head, *(f"{g['label']}: {g['note']}" + "".join(f"\n    {b.text}" for b in g["bars"])
                            for g in panels[key])] if panels[key] else []
    if waits and "error" not in waits and "na" not in waits:
        out += ["", "waits (waits.py): median from a kernel's end to the waiter running again, and CPU used while "
                "awaits are pending; ratio: to the driver's own wait (cuStreamSynchronize on another thread) on the "
                "same kernel"]
        out += [f"  {name}: " + (f"{w['ns'] / 1e6:.1f} ms" if w.get("unit") == "ms" else f"{fmt(w['ns'])} ns")
                + (f"  {w['ratio']:.2f}x" if "ratio" in w else "")
                + (f"  (target {w['target']}x)" if "target" in w else "")
                + (f"  (target < {w['target_ms']} ms)" if "target_ms" in w else "") for name, w in waits.items()]
    errors, quiet = results.get("lib_errors", {}), (None, "not applicable", "not measured", ops.NEEDS_GPU)
    notes = [f"  {x}" for x in results.get("round_errors", [])] + [f"  {n}: {e}" for n, e in errors.items()]
    notes += [f"  {n}.py: {x['error']}" for n, x in (("capture", cap), ("scale", scale), ("waits", waits))
              if "error" in x]
    notes += [f"  capture.py / {n}: {r['error']}" for n, r in cap.items() if isinstance(r, dict) and "error" in r]
    notes += [f"  {n} / {o['title']}: {what}" for o in opsd.values() for n, r in o["results"].items() if n not in errors
              for what in (r.get("na") not in quiet and f"n/a: {r['na']}", r.get("note")) if what]
    return "\n".join(out + (["", "notes:", *notes] if notes else []))

def groups(results: dict) -> dict:
    """Per panel of the chart ("ns", "ratio": to a C loop, timed in turn, "ms", "scale"), a group of bars a row."""
    opsd, panels = results["operations"], {"ns": [], "ratio": [], "ms": [], "scale": []}
    for key, o in opsd.items():
        ratio = (op := ops.OPS.get(key)) is not None and op.raw is not None
        unit, show = ("ratio", times) if ratio else (o["unit"], fmt)
        if op is None or (mine := _fig(o["results"].get("custream"), unit)) is None:
            continue
        f = (results.get("paired", {}).get(key, {}).get("floor") if ratio  # the least binding's figure
             else next((f for f in o["floors"] if f.get("lib") == LEAST), None)) or {}
        least = f.get("ratio_median" if ratio else "ns")  # a ratio row's: to the C loop
        over = (mine / least if least else None) if ratio else f.get("ratio_median")  # else: timed in turn with mine
        label = (f": {times(o['ratio_best_peer'])} {o['best_peer']} (best peer)" if o.get("ratio_best_peer") else "") \
            + (f", {over:.2f}x least binding" if over else "")
        bars = [Bar(LEAST, least, f"{show(least)}  {f.get('label', 'least binding (floor_ext.c)')}")] if least else []
        bars += [Bar(n, v, f"{show(v)}  {n}" + (label if n == "custream" else NOT_BEST * bool(r.get("not_best"))))
                 for n, r in o["results"].items() if (v := _fig(r, unit)) is not None]
        bars += [Bar("floor", f["ns"], f"{fmt(f['ns'])}  floor: {f['label']}", ref=True) for f in o["floors"]
                 if "lib" not in f]  # custream's own floor, hatched
        note = (f"C loop {fmt(_fig(o['results']['raw']))} ns; " if ratio else "") + (
            f"{o['target']}: {o['status']}" if o["target"] else "")
        cmp = o.get("compared_to") or {}
        target = op.times[0] * cmp["ns"] if cmp.get("ns") else op.raw if ratio else op.bound
        panels["ratio" if ratio else unit].append({"label": o["title"], "bars": bars, "target": target, "note": note})
    # capture.py's rows, as ratios to what each was timed in turn with: a main row, then its peers' ("  CuPy ...")
    cap = results.get("capture", {})
    for name, r in ({} if "error" in cap else cap).items():
        if "error" in r:  # a row that could not be made (the IPC rows, without torch): a note
            continue
        lib = next((n for n in COLORS if name.strip().startswith(n)), name.strip()) if name[0] == " " else "custream"
        if lib == "custream" or not panels["ratio"] or panels["ratio"][-1].get("rows") != "capture":
            verdict = f"; <= {r['target']}x: {'pass' if r['ratio'] <= r['target'] else 'MISS'}" if r["target"] else ""
            panels["ratio"].append({"label": name.replace(" (custream)", ""), "bars": [], "target": r["target"],
                                    "rows": "capture", "note": f"against {r['vs']}{verdict}"})
        text = f"{times(r['ratio'])}  {lib} ({fmt(r['ns'])} ns, against {fmt(r['vs_ns'])} ns)"
        panels["ratio"][-1]["bars"].append(Bar(lib, r["ratio"], text))
    # scale.py's rows, as ns per call (per kernel; threads: the wall time per call, all threads together), a bar a size
    for r in (results.get("scale") or {}).get("rows", []):
        bars = []
        for p in r.get("points", []):
            v = 1e9 / p["value"] if r["unit"] == "calls/s" else p["value"] / (p["n"] if r["per"] else 1)
            text = f"N={p['n']:,}: {fmt(p['value'])} {r['unit']}" + (
                f" ({fmt(v)} ns a {r['per'] or 'call'})" if r["per"] or r["unit"] == "calls/s" else "")
            bars.append(Bar("custream", v, text))
            if "raw_ns" in p:
                bars.append(Bar("raw", p["raw_ns"], f"N={p['n']:,}: {fmt(p['raw_ns'])} ns  raw_driver.c"))
        raw, per = f"; raw_driver.c {r['raw_growth']:.2f}x" if "raw_growth" in r else "", r.get("per")
        note = r.get("error") or f"growth{per and ' per ' + per} {r['growth']:.2f}x (expect {r['expect']}){raw}"
        panels["scale"].append({"label": r["title"], "bars": bars, "target": None, "rows": "scale", "note": note})
    return panels

def plot(results: dict, path: str) -> None:
    import matplotlib.pyplot as plt
    titles = {"ns": "ns per call (log scale)", "ms": "milliseconds (log scale): import in a fresh interpreter",
              "ratio": "ratio to the driver calls in a C loop (raw_driver.c = 1, the grey line), timed in turn",
              "scale": "scale rows (scale.py), log scale: ns a call at each size N (capture: a kernel; threads: the "
                       f"wall time, all together).\nDriver: {(results.get('scale') or {}).get('driver')}"}
    panels = [(titles[k], gs, k != "ratio") for k, p in groups(results).items() if (gs := [g for g in p if g["bars"]])]
    slots = [sum(len(g["bars"]) + 1.2 for g in gs) for _, gs, _ in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, 2.2 + 0.24 * sum(slots) + 0.8 * len(panels)),
                             gridspec_kw={"height_ratios": slots}, squeeze=False)
    for ax, (title, gs, log) in zip(axes[:, 0], panels):  # a group of bars a row, top to bottom
        y, ticks, labels, values = 0.0, [], [], [b.value for g in gs for b in g["bars"]]
        for g in gs:
            top = y
            for b in g["bars"]:  # each bar's text at its end; custream's bold, but in a scale row
                mine = b.lib == "custream" and g.get("rows") != "scale"
                ax.barh(y, b.value, 0.8, color="#d0d0d0" if b.ref else COLORS.get(b.lib, "#999"), hatch="//" * b.ref,
                        edgecolor="black" if mine or b.ref else "none", linewidth=0.8)
                ax.annotate(b.text, (b.value, y), xytext=(4, 0), textcoords="offset points", va="center",
                            zorder=5, fontsize=8.5, fontweight="bold" if mine else "normal",
                            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.85})
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
        ax.set_title(title, loc="left", fontsize=10.5, fontweight="bold")
    fig.text(0.5, 0.003, f"{machine(results)}\nbars: medians over rounds of fresh processes (capture and scale rows: "
             "one process); custream's outlined; floors hatched; targets dashed", ha="center", va="bottom",
             fontsize=8.5)
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight(), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
