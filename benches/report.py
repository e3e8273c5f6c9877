"""The workers' rounds as one results dict (what --json writes), the table and the chart."""

from statistics import median

import ops

LIBRARIES = ["raw", *(p.name for p in ops.PEERS), "custream"]
NOT_APPLICABLE = {"na": "not applicable"}


def _fig(entry, unit: str = "ns") -> float | None:
    return entry.get(unit) if isinstance(entry, dict) else None


def combine(entries: list[dict]) -> dict:
    """One library's figures for one operation over the rounds: the median and spread, and
    where it was timed in turn with raw_driver.c's loop, each round's ratio and their median."""
    unit = "ms" if any("ms" in e for e in entries) else "ns"
    good = [e for e in entries if unit in e]
    if not good:
        return entries[0] if entries else {"na": "not measured"}
    v = [e[unit] for e in good]
    out = {k: good[0][k] for k in ("stmt", "note", "not_best") if k in good[0]}
    out.update({unit: median(v), f"min_{unit}": min(v), f"max_{unit}": max(v), "rounds": len(v), f"per_round_{unit}": v})
    if "ratio" in good[0]:
        out.update(ratio=median(e["ratio"] for e in good), ratios=[e["ratio"] for e in good], raw_ns=[e["raw_ns"] for e in good])
    return out


def assemble(mode: str, rounds: dict, cython: dict) -> dict:
    """rounds: per library, its workers' outputs, one a round; cython: the Cython worker's figures."""
    errors = {n: ws[0]["error"] for n, ws in rounds.items() if ws and all("error" in w for w in ws)}
    figures = {n: {k: combine([w["ops"][k] for w in ws if k in w.get("ops", {})]) for k in ops.OPS} for n, ws in rounds.items()}
    series = {n: {k: {"stmt": f["stmt"], "ratios": f["ratios"], "ratio_median": f["ratio"]} for k, f in fs.items() if "ratio" in f}
              for n, fs in figures.items()}
    out: dict = {"schema": 2, "mode": mode, "libraries": LIBRARIES, "operations": {}, "paired": {}, "lib_errors": errors,
                 "round_errors": sorted({f"{n}: {w['error']}" for n, ws in rounds.items() if n not in errors for w in ws if "error" in w}),
                 "empty_loop_ns": {n: median(w["empty_loop"]["ns"] for w in ws if "empty_loop" in w)
                                   for n, ws in rounds.items() if any("empty_loop" in w for w in ws)}}
    for op in ops.OPERATIONS:
        mine = figures.get("custream", {}).get(op.key, {})
        res = {n: {"na": errors[n]} if n in errors else figures.get(n, {}).get(op.key, {"na": "not measured"}) for n in LIBRARIES}
        res["raw"] = NOT_APPLICABLE
        if op.key == "cython_handle_read":
            res = {n: cython.get(n, {"na": "not measured"}) if n in ("custream", "rmm") else NOT_APPLICABLE for n in LIBRARIES}
        elif op.raw is not None:  # the C loop: its median over the rounds, timed in turn with custream
            res["raw"] = {"ns": median(mine["raw_ns"])} if "raw_ns" in mine else {"na": "timed with --gpu only" if mode != "gpu" else "not measured"}
            if "ratios" in mine:
                out["paired"][op.key] = {**series["custream"][op.key], "raw_ns": mine["raw_ns"], "custream_ns": mine["per_round_ns"]}
                out["paired"][op.key].update({"floor": series["least binding"][op.key]} if op.key in series.get("least binding", {}) else {})
                out["paired"][op.key]["peers"] = {n: series[n][op.key] for n in LIBRARIES[1:-1] if op.key in series.get(n, {})}
        unit = "ratio" if op.raw is not None else op.unit  # a ratio row's peers compare on their ratio to raw
        value = _fig(res["custream"], unit)
        peers = {n: v for n in LIBRARIES[1:-1] if (v := _fig(res[n], unit)) is not None and not res[n].get("not_best")}
        best = min(peers, key=peers.get) if peers else None
        row = out["operations"][op.key] = {
            "title": op.title, "unit": op.unit, "target": op.target, "results": res, "floors": [], "best_peer": best,
            "ratio_best_peer": value / peers[best] if best and value else None, "ratio_raw": _fig(res["custream"], "ratio")}
        if op.gpu and mode != "gpu":
            row["status"] = "needs GPU"
        elif op.load:  # a field load adds well under a nanosecond to the loop; any call adds more
            floor = _fig(cython.get("floor"))
            row.update(floor_ns=floor, generated_c_reads_field=cython.get("generated_c_reads_field"),
                       floors=[{"label": cython["floor"]["label"], "ns": floor, "stmt": "nogil loop, barrier only"}] if floor else [])
            row["status"] = "n/a" if value is None else "pass" if floor and row["generated_c_reads_field"] and value <= floor + 1 else "MISS"
        elif op.times is not None:  # against another figure of the same run
            factor, lib, key = op.times
            other = _fig(figures.get(lib, {}).get(key, {}), op.unit)
            row.update(compared_to={"lib": lib, "op": key, op.unit: other})
            row["status"] = "n/a" if value is None or other is None else "pass" if value <= factor * other else "MISS"
        elif op.bound is None and op.raw is None:
            row["status"] = ""  # printed to compare with, no target of its own
        else:
            row["status"] = "n/a" if value is None else "pass" if value <= (op.bound or op.raw) else "MISS"
    return out


def fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def table(results: dict) -> str:
    names, opsd, m = results["libraries"], results["operations"], results.get("machine", {})
    head = ["operation", *names, "floor", "/best", "/raw", "target", ""]
    rows = [[o["title"] + (" [ms]" if o["unit"] == "ms" else ""),
             *["—" if o["results"].get(n) == NOT_APPLICABLE else fmt(_fig(o["results"].get(n), o["unit"])) for n in names],
             fmt(o["floors"][-1]["ns"]) if o["floors"] else "", f"{o['ratio_best_peer']:.2f}x" if o["ratio_best_peer"] else "",
             f"{o['ratio_raw']:.2f}x" if o["ratio_raw"] else "", o["target"], o["status"]] for o in opsd.values()]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    out = [f"custream benchmarks ({results['mode'].upper()} run{', quick' if results.get('settings', {}).get('quick') else ''}):"
           " median ns per call unless marked; '—' not applicable, 'n/a' see notes",
           f"machine: {m.get('gpu') or 'no GPU'}, driver {m.get('driver_version') or '—'}; {m.get('cpu')}; Python {m.get('python')}",
           "versions: " + ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if v),
           "empty timing loop (in every figure): " + ", ".join(f"{k} {fmt(v)}" for k, v in results.get("empty_loop_ns", {}).items()),
           ""] + ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                  for r in [head, ["-" * w for w in widths], *rows]]
    ratios = lambda e: " ".join(f"{r:.2f}" for r in e["ratios"]) + f"  median {e['ratio_median']:.2f}x"  # noqa: E731
    for key, e in results.get("paired", {}).items():
        if isinstance(e, dict) and "ratios" in e:
            out += ["", f"{opsd[key]['title']}, ratio to raw_driver.c's loop timed in turn, per round: {ratios(e)}"]
            out += [f"    least binding ({e['floor']['stmt']}): {ratios(e['floor'])}; custream over it: "
                    f"{e['ratio_median'] / e['floor']['ratio_median']:.2f}x"] if "floor" in e else []
            out += [f"    {n} ({p['stmt']}): {ratios(p)}" for n, p in e.get("peers", {}).items()]
    cap = results.get("capture", {})
    out += ["", "host functions and capture (capture.py): " + cap["error"]] if "error" in cap else []
    for name, r in ({} if "error" in cap else cap).items():
        verdict = "" if r["target"] is None else f"  <= {r['target']}x: " + ("pass" if r["ratio"] <= r["target"] else "MISS")
        out += [f"{name:<40} {fmt(r['ns']):>9} ns   {r['vs']:<26} {fmt(r['vs_ns']):>9} ns  {r['ratio']:.2f}x{verdict}"]
    notes = [f"  {x}" for x in results.get("round_errors", [])]
    for o in opsd.values():
        for n, r in o["results"].items():
            if n not in results.get("lib_errors", {}):
                quiet = (None, "not applicable", "needs a GPU (run with --gpu)") + (("not measured",) if not o["status"] else ())
                na = None if r.get("na") in quiet else f"n/a: {r['na']}"
                label = r.get("label") if o["title"] == "Cython handle read" else None
                notes += [f"  {n} / {o['title']}: {what}" for what in (na, r.get("note"), label) if what]
    notes += [f"  {n}: {err}" for n, err in results.get("lib_errors", {}).items() if err != "peers are measured with --gpu"]
    return "\n".join(out + (["", "notes:", *notes] if notes else []))


COLORS = {"raw": "#555555", "cuda.core": "#76b900", "CuPy": "#1f77b4", "torch": "#ee4c2c", "numba": "#00a3e0",
          "rmm": "#7f4fc9", "custream": "#f2a900"}


def plot(results: dict, path: str) -> None:
    """Each library's figure per operation, log scale, with the targets dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, opsd = results["libraries"], results["operations"]
    groups = [[k for k, o in opsd.items() if o["unit"] == unit] for unit in ("ns", "ms")]
    fig, axes = plt.subplots(1, 2, figsize=(15, 6.2), gridspec_kw={"width_ratios": [len(groups[0]), len(groups[1]) + 0.6]})
    for ax, keys, unit in zip(axes, groups, ("ns per call", "ms (import)")):
        for j, n in enumerate(names):
            bars = [(i + (j - (len(names) - 1) / 2) * 0.8 / len(names), v) for i, k in enumerate(keys)
                    if (v := _fig(opsd[k]["results"].get(n), opsd[k]["unit"]))]
            ax.bar([x for x, _ in bars], [v for _, v in bars], 0.8 / len(names), color=COLORS.get(n), label=n,
                   edgecolor="black" if n == "custream" else "none")
        for i, k in enumerate(keys):
            t, raw = ops.OPS[k], _fig(opsd[k]["results"].get("raw"))
            if target := t.bound if t.bound is not None else t.raw * raw if t.raw and raw else None:
                ax.hlines(target, i - 0.45, i + 0.45, colors="black", linestyles="dashed", linewidth=1)
        ax.set_yscale("log")
        ax.set_xticks(range(len(keys)), [f"{opsd[k]['title']}\n[{opsd[k]['status']}]" for k in keys], fontsize=8)
        ax.set_ylabel(unit)
        ax.grid(axis="y", which="both", alpha=0.25)
    axes[0].legend(ncol=len(names), fontsize=8, loc="upper left")
    m = results.get("machine", {})
    fig.text(0.5, 0.01, f"{m.get('gpu') or 'no GPU'}; {m.get('cpu')}; Python {m.get('python')}; {m.get('date')}\n"
             + ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if v)
             + "\nbars: each library's median over rounds of fresh processes, ns per call; dashed: the target",
             ha="center", va="bottom", fontsize=8)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)
