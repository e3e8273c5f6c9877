"""The workers' figures as one results dict (what --json writes), the table and the chart."""

from __future__ import annotations

from statistics import median

import ops

LIBRARIES = ["raw", *(p.name for p in ops.PEERS), "custream"]
NOT_APPLICABLE = {"na": "not applicable"}


def _fig(entry, unit: str = "ns") -> float | None:
    return entry.get(unit) if isinstance(entry, dict) else None


def _series(pairs: list[dict]) -> dict:
    ratios = [p["ratio"] for p in pairs]
    return {"stmt": pairs[0]["stmt"], "ratios": ratios, "ns": [p["ns"] for p in pairs], "ratio_median": median(ratios)}


def summarize_rounds(paired: dict | None) -> dict:
    """Per ratio-to-raw operation: custream's ratio in each round and their median, with the
    least binding's (floor_ext.c) and each paired peer's alike; per absolute target:
    custream's figure per round and its floor's."""
    paired = paired or {}
    rounds, out = paired.get("rounds", []), {}

    def pairs(key: str, where) -> list[dict]:  # where(round) -> {key: pair}
        return [g for r in rounds if "ratio" in (g := where(r).get(key, {}))]

    for key in ops.RATIO_KEYS:
        if mine := pairs(key, lambda r: r.get("ops", {})):
            out[key] = {"ratios": [g["ratio"] for g in mine], "raw_ns": [g["raw_ns"] for g in mine],
                        "custream_ns": [g["ns"] for g in mine], "ratio_median": median(g["ratio"] for g in mine)}
            if floor := pairs(key, lambda r: r.get("floor", {})):
                out[key]["floor"] = _series(floor)
            if peers := {n: _series(p) for n in paired.get("peers", []) if (p := pairs(key, lambda r: r.get("peers", {}).get(n, {})))}:
                out[key]["peers"] = peers
    for key in ops.BOUND_KEYS:
        if got := [r["bound"][key] for r in rounds if key in r.get("bound", {})]:
            out[key] = {"custream_ns": sorted(g["ns"] for g in got), "median": median(g["ns"] for g in got),
                        "floor": got[0]["floor"], "floor_ns": sorted(g["floor_ns"] for g in got),
                        "floor_ratio_median": median(g["floor_ratio"] for g in got)}
    errors = [r["error"] for r in rounds if "error" in r]
    errors += sorted({f"{n}: {got['error']}" for r in rounds for n, got in r.get("peers", {}).items() if "error" in got})
    out.update({k: v for k, v in (("errors", errors), ("stopped", paired.get("stopped")), ("floor_error", paired.get("floor_error"))) if v})
    return out


def _result(op: ops.Op, name: str, mode: str, libs: dict, cython: dict, imports: dict, rounds: dict) -> dict:
    if op.key == "import":
        return NOT_APPLICABLE if name == "raw" else imports.get(name) or {"na": "not measured"}
    if op.key == "cython_handle_read":
        return cython.get(name, {"na": "not measured"}) if name in ("custream", "rmm") else NOT_APPLICABLE
    if name == "raw":  # the C loops: their median over the paired rounds
        if op.raw is None or op.key not in rounds:
            return NOT_APPLICABLE if op.raw is None else {"na": "needs a GPU (run with --gpu)" if mode != "gpu" else "not measured"}
        return {"ns": median(rounds[op.key]["raw_ns"]), "from": f"median of {len(rounds[op.key]['raw_ns'])} paired rounds"}
    data = libs.get(name, {"error": "not measured"})
    return {"na": data["error"]} if "error" in data else data.get("ops", {}).get(op.key, {"na": "not measured"})


def assemble(mode: str, libs: dict, cython: dict, imports: dict, paired: dict | None = None) -> dict:
    """libs: each library's single-pass worker output; cython: the cython worker's figures;
    imports: each library's import time; paired: the rounds (run.paired_rounds)."""
    rounds = summarize_rounds(paired)
    out: dict = {"schema": 2, "mode": mode, "libraries": LIBRARIES, "operations": {}, "paired": rounds,
                 "lib_errors": {n: d["error"] for n, d in libs.items() if "error" in d},
                 "empty_loop_ns": {n: d["empty_loop"]["ns"] for n, d in libs.items() if "empty_loop" in d}}
    for op in ops.OPERATIONS:
        res = {n: _result(op, n, mode, libs, cython, imports, rounds) for n in LIBRARIES}
        mine, raw, entry = _fig(res["custream"], op.unit), _fig(res["raw"]), rounds.get(op.key)
        peers = {n: v for n in LIBRARIES[1:-1] if (v := _fig(res[n], op.unit)) is not None and not res[n].get("not_best")}
        best = min(peers, key=peers.get) if peers else None
        row = out["operations"][op.key] = {
            "title": op.title, "unit": op.unit, "target": op.target, "results": res, "floors": [],
            "best_peer": best, "best_peer_value": peers.get(best), "ratio_best_peer": mine / peers[best] if best and mine else None,
            "ratio_raw": mine / raw if raw and mine else None}
        if entry and op.bound is not None:  # judged on the median of the rounds
            row.update(custream_single_pass=mine, custream_rounds_median=entry["median"],
                       floors=[{"label": entry["floor"], "ns": median(entry["floor_ns"]), "stmt": ops.FLOORS[op.key][1]}])
        elif entry:  # the ratio the target is judged on: the median over rounds, and the best peer's alike
            row.update(ratio_raw_single_pass=row["ratio_raw"], ratio_raw=entry["ratio_median"],
                       ratio_raw_from=f"median of {len(entry['ratios'])} paired rounds")
            if entry.get("peers"):
                best = min(entry["peers"], key=lambda n: entry["peers"][n]["ratio_median"])
                row.update(ratio_best_peer_single_pass=row["ratio_best_peer"], best_peer=best,
                           best_peer_ratio_raw=entry["peers"][best]["ratio_median"],
                           ratio_best_peer=entry["ratio_median"] / entry["peers"][best]["ratio_median"],
                           ratio_best_from=f"medians of the paired rounds ({best})")
        if op.gpu and mode != "gpu":
            row["status"] = "needs GPU"
        elif op.load:  # a field load adds well under a nanosecond to the loop; any call adds more
            floor = _fig(cython.get("floor"))
            row.update(floor_ns=floor, generated_c_reads_field=cython.get("generated_c_reads_field"),
                       floors=[{"label": cython["floor"]["label"], "ns": floor, "stmt": "nogil loop, barrier only"}] if floor else [])
            row["status"] = "n/a" if mine is None else "pass" if floor and row["generated_c_reads_field"] and mine <= floor + 1 else "MISS"
        else:
            judged = row.get("custream_rounds_median", mine) if op.bound is not None else row["ratio_raw"]
            row["status"] = "n/a" if judged is None else "pass" if judged <= (op.bound or op.raw) else "MISS"
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
    summary = results.get("paired", {})
    ratios = lambda e: " ".join(f"{r:.2f}" for r in e["ratios"]) + f"  median {e['ratio_median']:.2f}x"  # noqa: E731
    for key, e in summary.items():
        if isinstance(e, dict) and "ratios" in e:
            out += [f"{opsd[key]['title']}, ratio to raw_driver.c's loop per paired round: {ratios(e)}"]
            out += [f"    least binding ({e['floor']['stmt']}): {ratios(e['floor'])}; custream over it: "
                    f"{e['ratio_median'] / e['floor']['ratio_median']:.2f}x"] if "floor" in e else []
            out += [f"    {n} ({p['stmt']}): {ratios(p)}" for n, p in e.get("peers", {}).items()]
        elif isinstance(e, dict) and "median" in e:
            out.append(f"{opsd[key]['title']}, custream per paired round: {' '.join(fmt(v) for v in e['custream_ns'])}  "
                       f"median {fmt(e['median'])} ns; its floor ({e['floor']}) in turn: {fmt(min(e['floor_ns']))}-"
                       f"{fmt(max(e['floor_ns']))} ns, custream over it: {e['floor_ratio_median']:.2f}x")
    out += [f"  {x}" for x in summary.get("errors", []) + [summary.get("stopped"), summary.get("floor_error")] if x]
    notes = []
    for o in opsd.values():
        for n, r in o["results"].items():
            if n not in results.get("lib_errors", {}):
                na = None if r.get("na") in (None, "not applicable", "needs a GPU (run with --gpu)") else f"n/a: {r['na']}"
                label = r.get("label") if o["title"] == "Cython handle read" else None
                notes += [f"  {n} / {o['title']}: {what}" for what in (na, r.get("note"), label) if what]
    notes += [f"  {n}: {err}" for n, err in results.get("lib_errors", {}).items() if err != "not selected"]
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
             + ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if v) + "\nbars: one pass per library, median "
             "ns per call; dashed: the target; [pass]/[MISS]: custream, judged on the paired rounds where there are any",
             ha="center", va="bottom", fontsize=8)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)
