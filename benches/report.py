"""The workers' figures as one results dict (what --json writes), the table and the chart."""

from __future__ import annotations

from statistics import median

import ops

LIBRARIES = ["raw", *(p.name for p in ops.PEERS), "custream"]
NOT_APPLICABLE = {"na": "not applicable"}


def _fig(entry, unit: str = "ns") -> float | None:
    return entry.get(unit) if isinstance(entry, dict) else None


def _series(pairs: list[dict]) -> dict:
    """One binding's pairs against raw over the rounds: its statement, ratio and ns per round."""
    ratios = [p["ratio"] for p in pairs]
    return {"stmt": pairs[0]["stmt"], "ratios": ratios, "ns": [p["ns"] for p in pairs], "ratio_median": median(ratios)}


def summarize_rounds(paired: dict | None) -> dict:
    """Per ratio-to-raw operation: custream's ratio in each round and the median over rounds,
    with the floor binding's (floor_ext.c) and each paired peer's alike; per absolute
    target: custream's figure per round and its floor's."""
    paired = paired or {}
    rounds = paired.get("rounds", [])
    out: dict = {}
    for key in ops.RATIO_KEYS:
        got = [r["ops"][key] for r in rounds if "ratio" in r.get("ops", {}).get(key, {})]
        if not got:
            continue
        entry = out[key] = {"ratios": [g["ratio"] for g in got], "raw_ns": [g["raw_ns"] for g in got],
                            "custream_ns": [g["ns"] for g in got], "ratio_median": median(g["ratio"] for g in got)}
        floor = [r["floor"][key] for r in rounds if "ratio" in r.get("floor", {}).get(key, {})]
        if floor:
            entry["floor"] = _series(floor)
        peers = {name: [r["peers"][name][key] for r in rounds if "ratio" in r.get("peers", {}).get(name, {}).get(key, {})]
                 for name in paired.get("peers", [])}
        if any(peers.values()):
            entry["peers"] = {name: _series(pairs) for name, pairs in peers.items() if pairs}
    for key in ops.BOUND_KEYS:
        got = [r["bound"][key] for r in rounds if key in r.get("bound", {})]
        if got:
            out[key] = {"custream_ns": sorted(g["ns"] for g in got), "median": median(g["ns"] for g in got),
                        "floor": got[0]["floor"], "floor_ns": sorted(g["floor_ns"] for g in got),
                        "floor_ratio_median": median(g["floor_ratio"] for g in got)}
    errors = [r["error"] for r in rounds if "error" in r]
    errors += sorted({f"{name}: {got['error']}" for r in rounds for name, got in r.get("peers", {}).items() if "error" in got})
    out.update({k: v for k, v in (("errors", errors), ("stopped", paired.get("stopped")),
                                   ("floor_error", paired.get("floor_error"))) if v})
    return out


def _result(op: ops.Op, name: str, mode: str, libs: dict, cython: dict, import_rows: dict, rounds: dict) -> dict:
    if op.key == "import":
        return NOT_APPLICABLE if name == "raw" else import_rows.get(name) or {"na": "not measured"}
    if op.key == "cython_handle_read":
        return cython.get(name, {"na": "not measured"}) if name in ("custream", "rmm") else NOT_APPLICABLE
    if name == "raw":  # the C loops, from the paired rounds
        if op.raw is None:
            return NOT_APPLICABLE
        if op.key not in rounds:
            return {"na": "needs a GPU (run with --gpu)" if mode != "gpu" else "not measured"}
        return {"ns": median(rounds[op.key]["raw_ns"]), "from": f"median of {len(rounds[op.key]['raw_ns'])} paired rounds"}
    data = libs.get(name, {"error": "not measured"})
    return {"na": data["error"]} if "error" in data else data.get("ops", {}).get(op.key, {"na": "not measured"})


def assemble(mode: str, libs: dict, cython: dict, import_rows: dict, paired: dict | None = None) -> dict:
    """libs: each library's single-pass worker output; cython: the cython worker's
    cython_handle_read entry; import_rows: per library, its import time; paired: the rounds."""
    rounds = summarize_rounds(paired)
    out: dict = {"schema": 2, "mode": mode, "libraries": LIBRARIES, "operations": {}, "paired": rounds,
                 "lib_errors": {n: d["error"] for n, d in libs.items() if "error" in d},
                 "empty_loop_ns": {n: d["empty_loop"]["ns"] for n, d in libs.items() if "empty_loop" in d}}
    for op in ops.OPERATIONS:
        res = {n: _result(op, n, mode, libs, cython, import_rows, rounds) for n in LIBRARIES}
        mine, raw = _fig(res["custream"], op.unit), _fig(res["raw"])
        peers = {n: v for n in LIBRARIES[1:-1] if (v := _fig(res[n], op.unit)) is not None and not res[n].get("not_best")}
        best = min(peers, key=peers.get) if peers else None
        row = out["operations"][op.key] = {
            "title": op.title, "unit": op.unit, "target": op.target, "results": res,
            "floors": [{"label": ops.FLOORS[op.key][0], "ns": median(rounds[op.key]["floor_ns"]), "stmt": ops.FLOORS[op.key][1]}]
            if op.key in rounds and op.bound is not None else [],
            "best_peer": best, "best_peer_value": peers.get(best), "ratio_best_peer": mine / peers[best] if best and mine else None,
            "ratio_raw": mine / raw if raw and mine else None, "status": "n/a" if mine is None else ""}
        if op.gpu and mode != "gpu":
            row["status"] = "needs GPU"
        elif mine is not None and op.bound is not None:
            row["status"] = "pass" if mine <= op.bound else "MISS"
        elif mine is not None and op.raw is not None:
            row["status"] = "n/a" if raw is None else "pass" if mine <= op.raw * raw else "MISS"
        elif mine is not None and op.load and "floor" in cython:
            # A field load adds well under a nanosecond to the loop; any call adds more.
            floor = cython["floor"]["ns"]
            row.update(floor_ns=floor, generated_c_reads_field=cython.get("generated_c_reads_field"),
                       floors=[{"label": cython["floor"]["label"], "ns": floor, "stmt": "nogil loop, barrier only"}])
            row["status"] = "pass" if row["generated_c_reads_field"] and mine <= floor + 1.0 else "MISS"
        entry = rounds.get(op.key)
        if entry and op.bound is not None:  # judged on the median of the rounds
            row.update(custream_single_pass=mine, custream_rounds_median=entry["median"],
                       status="pass" if entry["median"] <= op.bound else "MISS")
        elif entry:
            row.update(ratio_raw_single_pass=row["ratio_raw"], ratio_raw=entry["ratio_median"],
                       ratio_raw_from=f"median of {len(entry['ratios'])} paired rounds",
                       status="pass" if entry["ratio_median"] <= op.raw else "MISS")
            if entry.get("peers"):  # against the best peer measured the same way
                best = min(entry["peers"], key=lambda n: entry["peers"][n]["ratio_median"])
                row.update(ratio_best_peer_single_pass=row["ratio_best_peer"], best_peer=best,
                           best_peer_ratio_raw=entry["peers"][best]["ratio_median"],
                           ratio_best_peer=entry["ratio_median"] / entry["peers"][best]["ratio_median"],
                           ratio_best_from=f"medians of the paired rounds ({best})")
    return out


def fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _ratios(values: list[float]) -> str:
    return " ".join(f"{r:.2f}" for r in values)


def table(results: dict) -> str:
    names = results["libraries"]
    head = ["operation", *names, "floor", "/best", "/raw", "target", ""]
    rows = []
    for op in results["operations"].values():
        res = op["results"]
        rows.append([op["title"] + (" [ms]" if op["unit"] == "ms" else ""),
                     *["—" if res.get(n, {}).get("na") == "not applicable" else fmt(_fig(res.get(n), op["unit"])) for n in names],
                     fmt(op["floors"][-1]["ns"]) if op["floors"] else "",
                     f"{op['ratio_best_peer']:.2f}x" if op["ratio_best_peer"] else "",
                     f"{op['ratio_raw']:.2f}x" if op["ratio_raw"] else "", op["target"], op["status"]])
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]

    def line(r: list) -> str:
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    m, title = results.get("machine", {}), {k: op["title"] for k, op in results["operations"].items()}
    out = [f"custream benchmarks ({results['mode'].upper()} run{', quick' if results.get('settings', {}).get('quick') else ''}): "
           "median ns per call unless marked; '—' not applicable, 'n/a' see notes",
           f"machine: {m.get('gpu') or 'no GPU'}" + (f", driver {m['driver_version']}" if m.get("driver_version") else "")
           + f"; {m.get('cpu', '')}; Python {m.get('python', '')}",
           "versions: " + ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if v),
           "empty timing loop (in every figure, not subtracted): "
           + ", ".join(f"{k} {fmt(v)}" for k, v in results.get("empty_loop_ns", {}).items()),
           "", line(head), line(["-" * w for w in widths]), *map(line, rows), ""]
    summary = results.get("paired", {})
    rounds = {k: e for k, e in summary.items() if isinstance(e, dict)}
    if rounds:
        out.append("ratio to raw, per round: a fresh worker timing custream and raw_driver.c's loop for the same calls in "
                   "turn, in one process (the '/raw' column and the status of these rows are the median of the rounds; the "
                   "peers below custream, each in its own fresh worker per round, give these rows' '/best'):")
    for key, e in rounds.items():
        if "ratios" in e:
            out.append(f"  {title[key]}: {_ratios(e['ratios'])}  median {e['ratio_median']:.2f}x  (raw "
                       f"{fmt(min(e['raw_ns']))}-{fmt(max(e['raw_ns']))} ns, custream {fmt(min(e['custream_ns']))}-"
                       f"{fmt(max(e['custream_ns']))} ns)")
            if "floor" in e:
                f = e["floor"]
                out.append(f"    the least a binding adds (floor_ext.c: {f['stmt']}): {_ratios(f['ratios'])}  median "
                           f"{f['ratio_median']:.2f}x; custream over it: {e['ratio_median'] / f['ratio_median']:.2f}x")
            out += [f"    {n} ({p['stmt']}): {_ratios(p['ratios'])}  median {p['ratio_median']:.2f}x" for n, p in e.get("peers", {}).items()]
    bound = {k: e for k, e in rounds.items() if "median" in e}
    if bound:
        out.append("custream in the same rounds, for its absolute targets, timed in turn with its floor (the status of these "
                   "rows is the median of the rounds; the table's figure is the single pass):")
    for key, e in bound.items():
        out.append(f"  {title[key]}: {' '.join(fmt(v) for v in e['custream_ns'])}  median {fmt(e['median'])} ns  "
                   f"(target {results['operations'][key]['target']})")
        out.append(f"    its floor ({e['floor']}) in turn: {fmt(min(e['floor_ns']))}-{fmt(max(e['floor_ns']))} ns; "
                   f"custream over it: median {e['floor_ratio_median']:.2f}x")
    out += [f"  {x}" for x in summary.get("errors", [])]
    out += [f"  stopped {summary['stopped']}"] if "stopped" in summary else []
    out += [f"  floor_ext.c not built: {summary['floor_error']}"] if "floor_error" in summary else []
    notes = []
    for op in results["operations"].values():
        for n, r in op["results"].items():
            if not isinstance(r, dict) or n in results.get("lib_errors", {}):
                continue
            if r.get("na") not in (None, "not applicable", "needs a GPU (run with --gpu)"):
                notes.append(f"  {n} / {op['title']}: n/a: {r['na']}")
            for what in (r.get("note"), r.get("label") if op["title"] == "Cython handle read" else None):
                if what:
                    notes.append(f"  {n} / {op['title']}: {what}")
    notes += [f"  {n}: {err}" for n, err in results.get("lib_errors", {}).items()
              if err not in ("not selected", "peers are measured with --gpu")]
    return "\n".join(out + (["", "notes:", *notes] if notes else []))


COLORS = {"raw": "#555555", "cuda.core": "#76b900", "CuPy": "#1f77b4", "torch": "#ee4c2c", "numba": "#00a3e0",
          "rmm": "#7f4fc9", "custream": "#f2a900"}


def plot(results: dict, path: str) -> None:
    """custream against the peers per operation, log scale; targets dashed, floors marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    names, opsd = results["libraries"], results["operations"]
    groups = [[k for k, o in opsd.items() if o["unit"] == unit] for unit in ("ns", "ms")]
    fig, axes = plt.subplots(1, 2, figsize=(15, 6.2), gridspec_kw={"width_ratios": [len(groups[0]), len(groups[1]) + 0.6]})
    for ax, keys, unit in zip(axes, groups, ("ns per call", "ms (import)")):
        width = 0.8 / len(names)
        for j, n in enumerate(names):
            bars = [(i + (j - (len(names) - 1) / 2) * width, v) for i, k in enumerate(keys)
                    if (v := _fig(opsd[k]["results"].get(n), opsd[k]["unit"]))]
            drawn = ax.bar([x for x, _ in bars], [v for _, v in bars], width, color=COLORS.get(n),
                           edgecolor="black" if n == "custream" else "none", linewidth=1.2)
            if n == "custream":
                for b, (_, v) in zip(drawn, bars):
                    ax.annotate(fmt(v), (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
        for i, k in enumerate(keys):
            o, raw = opsd[k], _fig(opsd[k]["results"].get("raw"))
            t = ops.OPS.get(k)
            target = t and (t.bound if t.bound is not None else t.raw * raw if t.raw is not None and raw else None)
            if target:
                ax.hlines(target, i - 0.45, i + 0.45, colors="black", linestyles="dashed", linewidth=1)
            for f in o["floors"]:
                ax.plot([i + 0.5], [f["ns"]], marker="_", color="grey", markersize=9, markeredgewidth=2)
        ax.set_yscale("log")
        ax.set_ylim(ax.get_ylim()[0], ax.get_ylim()[1] * 3)
        ax.set_xticks(range(len(keys)), [opsd[k]["title"] + f"\n[{opsd[k]['status']}]" for k in keys], fontsize=8)
        ax.set_ylabel(unit)
        ax.grid(axis="y", which="both", alpha=0.25)
    handles = [Patch(facecolor=COLORS.get(n), edgecolor="black" if n == "custream" else "none", label=n) for n in names]
    handles += [Line2D([], [], color="black", linestyle="dashed", label="target"),
                Line2D([], [], color="grey", marker="_", linestyle="none", markersize=14, markeredgewidth=2, label="floors")]
    fig.legend(handles=handles, ncol=len(handles), fontsize=8, loc="upper center", frameon=False)
    m = results.get("machine", {})
    fig.text(0.5, 0.01, f"{m.get('gpu') or 'no GPU (CPU part only)'}; {m.get('cpu', '')}; Python {m.get('python', '')}\n"
             + ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if v)
             + "\nbars: one pass per library, median ns per call; [pass]/[MISS]: custream judged on the paired rounds "
             f"where there are any (see the table); {m.get('date', '')}", ha="center", va="bottom", fontsize=8)
    fig.tight_layout(rect=(0, 0.09, 1, 0.95))
    fig.savefig(path, dpi=130)
    plt.close(fig)
