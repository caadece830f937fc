"""Write BENCHMARKS.md (to stdout) from the results of a `make bench` run.

Reads ``<data>/manifest.json`` (gen_captures.py), the criterion results under
``<target>/criterion/**/new/{benchmark,estimates}.json``, ``<data>/compare.json``
(compare.py), ``<data>/live.json`` (live.py), ``<data>/delta.json`` (delta_sink.py),
``<data>/cli.json`` (cli_drain.py) and ``<data>/spark.json`` with
``<data>/spark/profile-*.json`` (spark_throughput.py). ``--spark-only BENCHMARKS.md`` rewrites
only that file's Spark section (``benches/run.sh spark``). Every number and every verdict printed is computed from
those files; a missing part is reported as not run. No prose written by hand goes into the
report: the analyses of earlier runs (``benches/findings.md``) are linked, not copied, since
their numbers and verdicts are those runs'.

MB is 10^6 bytes of pgoutput message payload.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

TARGETS = {"binary": 500.0, "text": 250.0}
#: Issue 23: the Arrow decoder on one core at least this many MB/s on the wide and
#: numeric/timestamp shapes too.
SHAPE_TARGET = 1000.0
SHAPE_TARGET_CAPTURES = ("wide-binary", "wide-text", "numts-binary", "numts-text")
PEER_RATIO_TARGET = 50.0
LIVE_TARGET = 0.90
#: Issue 22: Spark decode on local[2] at least this share of the floor and this many MB/s.
SPARK_FLOOR_TARGET = 0.50
SPARK_MBPS_TARGET = 60.0
SPARK_TARGET_MASTER = "local[2]"
#: Issue 23: the Spark streaming source drains a backlog in at most 1/0.9 of stream()'s time.
STREAM_TARGET = 0.90
STREAM_HEADING = ("## Spark: the streaming source against `stream()` and Spark's own floor "
                  "(`benches/spark_stream_throughput.py`)")
SPARK_HEADING = "## Spark: decode against Spark's own floor (`benches/spark_throughput.py`)"
#: What each Spark capture is (benches/gen_captures.py --spark).
SPARK_SHAPES = {
    "pgbench": "`pgbench -i -s 20` (one transaction of 2 M inserts), then 71,000 pgbench transactions; protocol 1, text",
    "streamed": "protocol 2, `streaming 'on'`, 64 kB `logical_decoding_work_mem`: two sessions' large "
                "transactions interleaved, with subtransactions, some rolled back; text",
    "toast": "40 columns and three out-of-line TOAST values a row; updates leaving them unchanged; "
             "protocol 1, binary",
    "tables": "60 tables, one of them (`big`) over 1 GB; protocol 1, text",
}


def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return {"cpu": cpu, "nproc": nproc, "kernel": platform.release(), "rustc": rustc,
            "python": platform.python_version(), "load": load}


def criterion_results(root: Path) -> dict[tuple[str, str], dict[str, float]]:
    """(group, function) → {median_s, bytes, mb_per_s}."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    if not root.is_dir():
        return out
    for bench in root.glob("**/new/benchmark.json"):
        meta = load_json(bench)
        est = load_json(bench.parent / "estimates.json")
        if not meta or not est:
            continue
        median_s = est["median"]["point_estimate"] / 1e9
        nbytes = float((meta.get("throughput") or {}).get("Bytes", 0))
        out[(meta["group_id"], meta["function_id"])] = {
            "median_s": median_s, "bytes": nbytes,
            "mb_per_s": nbytes / median_s / 1e6 if median_s else 0.0}
    return out


def fmt_rate(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def verdict(ok: bool | None) -> str:
    return "not run" if ok is None else ("met" if ok else "**missed**")


class Target:
    """A target of issue 7: what was measured in this run, and whether it meets it."""

    def __init__(self, measured: float | None, goal: float, unit: str, below: bool = False) -> None:
        self.measured, self.goal, self.unit, self.below = measured, goal, unit, below

    @property
    def ok(self) -> bool | None:
        if self.measured is None:
            return None
        return self.measured < self.goal if self.below else self.measured >= self.goal

    def text(self, x: float | None) -> str:
        if x is None:
            return "–"
        if self.unit == "×":
            return f"{x:.1f}×"
        if self.unit == "%":
            return f"{x:.0%}"
        return f"{fmt_rate(x)} {self.unit}"
#: The capture shapes the default's cost is shown on: workload → what it is.
SHAPES = {"text": "bulk load: text-heavy rows in a few large transactions",
          "pgbench": "pgbench: a 100,000-row load, then many small transactions",
          "wide": "wide rows (60 columns)"}


def views_section(crit: dict[tuple[str, str], dict[str, float]], compare: dict[str, Any]) -> list[str]:
    """What the default's plain utf8/binary columns cost beside views (``views=True``), both
    measured in the same run: criterion's ``pgoutput_arrow`` vs ``pgoutput_arrow_views`` and
    compare.py's ``pgoutput_arrow`` vs ``pgoutput_arrow_views``."""
    out = ["## The default's cost: plain utf8/binary vs views", "",
           "The default output has plain `utf8`/`binary` columns, which every consumer takes; "
           "`views=True` builds `string_view`/`binary_view` arrays pointing into the messages "
           "instead (zero copy). Both measured in the same run, side by side; ratio = plain "
           "median time ÷ views median time (above 1: the default is slower by that factor).", ""]
    by = {(r["capture"], r["decoder"]): r for r in compare.get("results", []) if "median_s" in r}
    rows = []
    for workload, shape in SHAPES.items():
        for mode in ("text", "binary"):
            cap = f"{workload}-{mode}"
            plain = crit.get((f"decode/{cap}", "pgoutput_arrow"))
            views = crit.get((f"decode/{cap}", "pgoutput_arrow_views"))
            p_py = by.get((cap, "pgoutput_arrow"))
            v_py = by.get((cap, "pgoutput_arrow_views"))
            if not (plain and views) and not (p_py and v_py):
                continue
            rust = (f"{fmt_rate(plain['mb_per_s'])} | {fmt_rate(views['mb_per_s'])} | "
                    f"{plain['median_s'] / views['median_s']:.2f}" if plain and views
                    and "median_s" in plain and "median_s" in views else "– | – | –")
            py = (f"{p_py['median_s'] * 1e3:.1f} | {v_py['median_s'] * 1e3:.1f} | "
                  f"{p_py['median_s'] / v_py['median_s']:.2f}" if p_py and v_py else "– | – | –")
            rows.append(f"| {cap} | {shape} | {rust} | {py} |")
    if not rows:
        return out[:2] + ["Not run.", ""]
    out += ["| capture | shape | Rust plain MB/s | Rust views MB/s | Rust plain ÷ views (time) "
            "| Python decode() plain ms | views ms | plain ÷ views (time) |",
            "|---|---|---:|---:|---:|---:|---:|---:|", *rows, ""]
    return out


def spark_section(data: Path) -> tuple[list[str], dict[str, Target]]:
    """The Spark section and its targets, from ``spark.json`` and the decode profile."""
    res = load_json(data / "spark.json")
    out = [SPARK_HEADING, ""]
    targets: dict[str, Target] = {}
    if not res or not res.get("results"):
        return out + ["Not run.", ""], targets
    out += [
        f"Per capture: {res['warmup']} warm-up round(s), then {res['runs']} measured rounds, each "
        "timing the **floor** (`spark.read.parquet(dir).mapInArrow(lambda it: it, schema)` written "
        "to the `noop` sink: Spark moving the capture's bytes through a Python worker and back) "
        "and then **decode** (`pgoutput_arrow.spark.decode(spark.read.parquet(dir))`, every table "
        "written to `noop`; decode's tasks read the files' row groups themselves, `spark/_pieces.py`) "
        "and the same decode **through Spark's reader** (that turned off, as for a capture that is "
        "not a bare scan of local files: Spark reads the files and ships every row to the Python "
        "workers, as in the floor), each timed from a DataFrame made beforehand (`spark.read.parquet(dir)`, "
        "the same for all three; until 2026-11-29 decode's timing included it, 0.05-0.3 s), "
        "interleaved, `spark.catalog.clearCache()` after each; one "
        "SparkSession per master; medians (min–max). MB/s of capture payload. *Share of floor* = "
        "floor time ÷ decode time. *decode()* = `pgoutput_arrow.decode()` of the same files in one "
        "process, for reference. Load = the 1-minute load average before each timed run "
        f"(median, max). This run took {res['seconds'] / 60:.1f} min, finished {res.get('finished', '?')}"
        + ("" if res.get("complete", True) else " (interrupted: only the rows below were measured)") + ".",
        "", "| capture | shape | messages | payload MB | files |", "|---|---|---:|---:|---:|"]
    for c, info in res["captures"].items():
        out.append(f"| {c} | {SPARK_SHAPES.get(c, '')} | {info['messages']:,} | "
                   f"{info['payload_bytes'] / 1e6:,.0f} | {len(info['files'])} |")
    out += ["", "| capture | master | floor s | floor MB/s | decode s | decode MB/s | k msg/s "
            "| share of floor | decode phases s (call, first table, rest) | through Spark's reader s (share) "
            "| decode() s | load |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    single = res.get("single_process", {})
    for r in res["results"]:
        f, d = r["floor"], r["decode"]
        one = single.get(r["capture"])
        loads = [x for pair in r["loads"] for x in pair]
        ph = ", ".join(f"{x:.1f}" for x in d["phase_medians_s"])
        via = r.get("spark_reader")
        ph += (f" | {via['median_s']:.2f} ({f['median_s'] / via['median_s']:.0%})" if via else " | –")
        out.append(
            f"| {r['capture']} | {r['master']} | {f['median_s']:.2f} ({f['min_s']:.2f}–{f['max_s']:.2f}) "
            f"| {fmt_rate(f['mb_per_s'])} | {d['median_s']:.2f} ({d['min_s']:.2f}–{d['max_s']:.2f}) "
            f"| {fmt_rate(d['mb_per_s'])} | {d['messages_per_s'] / 1e3:,.0f} | {r['share_of_floor']:.0%} "
            f"| {ph} | {one['median_s']:.2f} | {sorted(loads)[len(loads) // 2]:.1f}, {max(loads):.1f} |"
            if one else
            f"| {r['capture']} | {r['master']} | {f['median_s']:.2f} | {fmt_rate(f['mb_per_s'])} "
            f"| {d['median_s']:.2f} | {fmt_rate(d['mb_per_s'])} | {d['messages_per_s'] / 1e3:,.0f} "
            f"| {r['share_of_floor']:.0%} | {ph} | – | {max(loads):.1f} |")
    out.append("")
    limit = res.get("run_timeout_s", "?")
    stalled = [f"{s} (cancelled after {limit} s)" for r in res["results"] for s in r.get("stalls", [])]
    if stalled:
        out += ["Rounds stalled, their Spark jobs cancelled and the round run again (not counted): "
                + "; ".join(stalled) + ".", ""]
    by = {(r["capture"], r["master"]): r for r in res["results"]}
    scaling = [(c, by[(c, "local[1]")], by[(c, "local[2]")]) for c in res["captures"]
               if (c, "local[1]") in by and (c, "local[2]") in by]
    if scaling:
        out += ["local[1] against local[2]: time on local[1] ÷ time on local[2] (2.0 = the second "
                "core doubles the speed).", "", "| capture | floor | decode |", "|---|---:|---:|"]
        for c, one, two in scaling:
            out.append(f"| {c} | {one['floor']['median_s'] / two['floor']['median_s']:.2f} | "
                       f"{one['decode']['median_s'] / two['decode']['median_s']:.2f} |")
        out.append("")
    for c in res["captures"]:
        r = by.get((c, SPARK_TARGET_MASTER))
        targets[f"Spark decode {c} on {SPARK_TARGET_MASTER} ≥ {SPARK_FLOOR_TARGET:.0%} of the floor"] = Target(
            r["share_of_floor"] if r else None, SPARK_FLOOR_TARGET, "%")
        targets[f"Spark decode {c} on {SPARK_TARGET_MASTER} ≥ {SPARK_MBPS_TARGET:.0f} MB/s"] = Target(
            r["decode"]["mb_per_s"] if r else None, SPARK_MBPS_TARGET, "MB/s")
    for prof_path in sorted((data / "spark").glob("profile-*.json")):
        prof = load_json(prof_path)
        out += [f"**Where decode's time goes: {prof['capture']} on {prof['master']}** "
                f"(`spark_throughput.py --profile {prof['capture']}`: one warm run, stages from "
                f"Spark's REST API; total {prof['total_s']:.1f} s, load {prof['load']})", "",
                "| phase | s |", "|---|---:|"]
        out += [f"| {k} | {v:.2f} |" for k, v in prof["phases_s"].items()]
        out += ["", "| stage | jobs | tasks | wall s | executor run s | executor CPU s | input MB "
                "| shuffle write MB | shuffle read MB | spilled (memory / disk) MB | task run s, longest first |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for s in sorted(prof["stages"], key=lambda s: s["stage"]):
            out.append(f"| {s['stage']} {s['name']} | {','.join(map(str, s['jobs']))} | {s['tasks']} "
                       f"| {s['duration_s']:.2f} | {s['executor_run_s']:.2f} | {s['executor_cpu_s']:.2f} "
                       f"| {s['input_mb']:.0f} | {s['shuffle_write_mb']:.0f} | {s['shuffle_read_mb']:.0f} "
                       f"| {s['memory_spilled_mb']:.0f} / {s['disk_spilled_mb']:.0f} "
                       f"| {', '.join(f'{t:.2f}' for t in s.get('task_run_s', [])[:8])} |")
        out.append("")
    out += ["| target (issue 22) | this run | result |", "|---|---:|---|"]
    out += [f"| {n} | {t.text(t.measured)} | {verdict(t.ok)} |" for n, t in targets.items()]
    out.append("")
    return out, targets


def stream_section(data: Path) -> tuple[list[str], dict[str, Target]]:
    """The streaming source's section and its target, from ``spark_stream.json``."""
    res = load_json(data / "spark_stream.json")
    out = [STREAM_HEADING, ""]
    if not res or not res.get("medians"):
        return out + ["Not run.", ""], {}
    med = res["medians"]
    out += [
        f"A backlog of {res['rows']:,} changes (a third each inserts, updates and deletes of one "
        f"table, in {res['txns']:,} transactions; {res['wal_mb']:.0f} MB of WAL), one slot per "
        f"drain; {res['master']}, a session warmed by a query of {res['warm_rows']:,} changes; "
        f"median of {res['runs']} runs in rotated order, finished {res['finished']}. "
        "**readStream** = `spark.readStream.format(\"pgoutput\")` with Trigger.AvailableNow into "
        "`noop`, from the query's start to its end; **stream()** = `pgoutput_arrow.stream()` "
        "draining a slot of the same contents, decoded as the source decodes; **floor** = Spark's "
        "own floor for a Python streaming source: the same rows, decoded beforehand and already in "
        f"Spark's Arrow types, served from an Arrow file by a source that does nothing else "
        f"({res['floor_batches']} micro-batches). CPU = seconds of each kind of process, sampled "
        "from /proc (the JVM's threads by kind; the walsender; Spark's Python processes).",
        "", "| drain | median s | changes/s | CPU s by process |", "|---|---:|---:|---|"]
    names = {"spark": "readStream → noop", "live": "stream()", "floor": "floor → noop"}
    for which in ("spark", "live", "floor"):
        if which in med:
            m = med[which]
            cpu = ", ".join(f"{k} {v:.2f}" for k, v in m["cpu_s"].items() if v >= 0.005)
            out.append(f"| {names[which]} | {m['median_s']:.2f} | {res['rows'] / m['median_s']:,.0f} | {cpu} |")
    out.append("")
    spark, live, floor = (med.get(k, {}).get("median_s") for k in ("spark", "live", "floor"))
    if spark and live and floor:
        out += [f"readStream ÷ stream(): {live / spark:.0%}; readStream ÷ floor: {floor / spark:.0%}; "
                f"floor ÷ stream(): {live / floor:.0%} (time ratios: the share of the other's speed).", ""]
    targets = {f"Spark streaming source ≥ {STREAM_TARGET:.0%} of stream()'s drain (issue 23)":
               Target(live / spark if spark and live else None, STREAM_TARGET, "%")}
    return out, targets


def _sections(text: list[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """A report's lines before its first ``## `` heading, then each section: (heading, body)."""
    preamble: list[str] = []
    out: list[tuple[str, list[str]]] = []
    for ln in text:
        if ln.startswith("## "):
            out.append((ln, []))
        else:
            (out[-1][1] if out else preamble).append(ln)
    return preamble, out


#: How a section kept from an earlier report begins (:func:`keep_previous`).
_KEPT = "*Not part of this run: kept from the report of "


def keep_previous(lines: list[str], previous: Path) -> list[str]:
    """``lines`` (a new report) with each section that says "Not run." replaced by the same
    section of ``previous`` (the report before), marked as kept from that report; rows of the
    targets table that this run did not measure likewise."""
    if not previous.is_file():
        return lines
    old = previous.read_text().splitlines()
    stamp = next((ln.split(" on ", 1)[1].split(".", 1)[0] for ln in old if ln.startswith("Regenerated by ")), "?")
    before = dict(_sections(old)[1])

    def marked(row: str) -> str:
        # A row kept already says from which report: that one.
        return row if "(report of " in row else row.rstrip(" |") + f" (report of {stamp}) |"

    preamble, sections = _sections(lines)
    result = list(preamble)
    for head, body in sections:
        result.append(head)
        old_body = before.get(head)
        not_run = any(ln.strip() == "Not run." for ln in body)
        if old_body is not None and not_run and not any(ln.strip() == "Not run." for ln in old_body):
            # A section kept already says from which report: that one.
            if not any(ln.startswith(_KEPT) for ln in old_body):
                result.extend(["", f"{_KEPT}{stamp} (its own run, as said below).*"])
            result.extend(old_body)
        elif old_body is not None and head.startswith("## Targets"):
            # The table's rows: this run's, then the earlier report's that this run did not
            # measure, marked.
            old_rows = {ln.split(" | ")[0]: ln for ln in old_body
                        if ln.startswith("| ") and not ln.startswith(("| target ", "|---"))}
            new_rows = {ln.split(" | ")[0] for ln in body if ln.startswith("| ")}
            table_end = max((i for i, ln in enumerate(body) if ln.startswith("| ")), default=-1)
            for i, ln in enumerate(body):
                name = ln.split(" | ")[0]
                result.append(marked(old_rows[name]) if ln.startswith("| ") and ln.endswith("| not run |")
                              and name in old_rows else ln)
                if i == table_end:
                    result.extend(marked(row) for name, row in old_rows.items() if name not in new_rows)
        else:
            result.extend(body)
    return result


def replace_spark_section(path: Path, data: Path) -> None:
    """Rewrite only the Spark section of an existing BENCHMARKS.md (inserted before the
    issue-7 targets when it has none yet)."""
    lines = path.read_text().splitlines()
    section, _ = spark_section(data)
    if SPARK_HEADING in lines:
        start = lines.index(SPARK_HEADING)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    else:
        start = end = next((i for i, ln in enumerate(lines) if ln.startswith("## Targets")), len(lines))
    path.write_text("\n".join(lines[:start] + section + lines[end:]) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--criterion", default="")
    ap.add_argument("--command", default="make bench")
    ap.add_argument("--spark-only", metavar="BENCHMARKS_MD", default=None,
                    help="rewrite only this file's Spark section, in place")
    ap.add_argument("--previous", metavar="BENCHMARKS_MD", default=None,
                    help="the report before this run: the sections of the steps this run "
                         "left out are kept from it, marked as such")
    args = ap.parse_args()
    data = Path(args.data)
    if args.spark_only:
        replace_spark_section(Path(args.spark_only), data)
        return
    manifest = load_json(data / "manifest.json") or {"captures": []}
    crit = criterion_results(Path(args.criterion)) if args.criterion else {}
    compare = load_json(data / "compare.json") or {"results": []}
    live = load_json(data / "live.json")
    cli = load_json(data / "cli.json")
    m = machine()
    lines: list[str] = []
    w = lines.append

    w("# Benchmarks")
    w("")
    w(f"Regenerated by `{args.command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
      "Every number below comes from that run (`benches/run.sh`, `benches/report.py`), except "
      "in the sections marked as kept from an earlier report (steps this run left out); "
      "MB = 10^6 bytes of pgoutput message payload; medians.")
    w("")
    w(f"Machine: {m['nproc']} cores ({m['cpu']}), Linux {m['kernel']}, {m['rustc']}, "
      f"Python {m['python']}; load average at report time {m['load']} "
      "(the machine is shared: absolute numbers are noisy, ratios measured side by side less so).")
    w("")

    # ---------------------------------------------------------------- captures
    w("## Captures")
    w("")
    w(f"Generated from real PostgreSQL {manifest.get('server_version', '?')} workloads by "
      f"`benches/gen_captures.py` (target {manifest.get('target_mb', '?')} MB each, "
      "protocol version 1; binary = `binary 'true'`).")
    w("")
    if not manifest["captures"]:
        w("Not run.")
        w("")
    else:
        w("| capture | messages | payload MB | kinds |")
        w("|---|---:|---:|---|")
    for c in manifest["captures"]:
        kinds = ", ".join(f"{k} {v}" for k, v in c["kinds"].items())
        w(f"| {c['stem']} | {c['messages']:,} | {c['payload_bytes'] / 1e6:.1f} | {kinds} |")
    w("")

    # ---------------------------------------------------------------- criterion
    targets: dict[str, Target] = {}
    w("## Rust, one core (criterion)")
    w("")
    funcs = sorted({f for (_, f) in crit})
    groups = sorted({g for (g, _) in crit})
    if not crit:
        w("Not run.")
    else:
        w("MB/s of payload (median time per pass over the capture).")
        w("")
        for prefix, title in (("parse/", "Parser (`pgoutput_proto::Parser`, every cell walked)"),
                              ("decode/", "Arrow decoder (`pgoutput_arrow::Decoder`)")):
            gs = [g for g in groups if g.startswith(prefix)]
            if not gs:
                w(f"{title}: not run.")
                w("")
                continue
            fs = [f for f in funcs if any((g, f) in crit for g in gs)]
            w(f"**{title}**")
            w("")
            w("| capture | " + " | ".join(fs) + " |")
            w("|---|" + "---:|" * len(fs))
            for g in gs:
                cells = [fmt_rate(crit[(g, f)]["mb_per_s"]) if (g, f) in crit else "–" for f in fs]
                w(f"| {g[len(prefix):]} | " + " | ".join(cells) + " |")
            w("")
        # Ratios of interest, parser vs peer.
        rows = []
        for g in groups:
            if g.startswith("parse/") and (g, "pgoutput_proto") in crit:
                ours = crit[(g, "pgoutput_proto")]["mb_per_s"]
                peer = crit.get((g, "pg_walstream"), {}).get("mb_per_s")
                mem = crit.get((g, "memcpy"), {}).get("mb_per_s")
                rows.append(f"| {g[6:]} | {ours / peer:.1f}× | {ours / mem:.2f} |"
                            if peer and mem else f"| {g[6:]} | – | – |")
        if rows:
            w("| capture | pgoutput_proto ÷ pg_walstream | pgoutput_proto ÷ memcpy |")
            w("|---|---:|---:|")
            lines.extend(rows)
            w("")
    for mode, target in TARGETS.items():
        key = (f"decode/pgbench-{mode}", "pgoutput_arrow")
        targets[f"decode to Arrow, pgbench {mode} ≥ {target:.0f} MB/s"] = Target(
            crit[key]["mb_per_s"] if key in crit else None, target, "MB/s")
    for capture in SHAPE_TARGET_CAPTURES:
        key = (f"decode/{capture}", "pgoutput_arrow")
        if key in crit:
            targets[f"decode to Arrow, {capture} ≥ {SHAPE_TARGET:,.0f} MB/s (issue 23)"] = Target(
                crit[key]["mb_per_s"], SHAPE_TARGET, "MB/s")

    # ---------------------------------------------------------------- python
    w("## Python, one process per decoder and capture (`benches/compare.py`)")
    w("")
    res = [r for r in compare["results"] if "mb_per_s" in r]
    errors = [r for r in compare["results"] if "error" in r]
    if not res:
        w("Not run.")
    else:
        w(f"MB/s, median of {compare.get('runs')} runs after a warm-up, capture already in memory "
          "(a pyarrow table for pgoutput_arrow; a list of bytes for the others). pypgoutput reads "
          "text-format values only and leaves them as strings; pgoutput_arrow converts every "
          "value to its Arrow type.")
        w("")
        caps = sorted({r["capture"] for r in res})
        by = {(r["capture"], r["decoder"]): r for r in res}
        w("| capture | pgoutput_arrow.decode | pypgoutput | kind-byte loop | ÷ pypgoutput | ÷ kind-byte loop |")
        w("|---|---:|---:|---:|---:|---:|")
        for c in caps:
            ours = by.get((c, "pgoutput_arrow"), {}).get("mb_per_s")
            py = by.get((c, "pypgoutput"), {}).get("mb_per_s")
            kb = by.get((c, "kind_byte"), {}).get("mb_per_s")
            r1 = f"{ours / py:.0f}×" if ours and py else "–"
            r2 = f"{ours / kb:.2f}" if ours and kb else "–"
            w(f"| {c} | {fmt_rate(ours)} | {fmt_rate(py)} | {fmt_rate(kb)} | {r1} | {r2} |")
        w("")
        ours = by.get(("pgbench-text", "pgoutput_arrow"), {}).get("mb_per_s")
        py = by.get(("pgbench-text", "pypgoutput"), {}).get("mb_per_s")
        targets[f"≥ {PEER_RATIO_TARGET:.0f}× pypgoutput (pgbench text, Python decode)"] = Target(
            ours / py if ours and py else None, PEER_RATIO_TARGET, "×")
    for r in errors:
        w(f"- {r['decoder']} on {r['capture']} failed: `{r['error'].splitlines()[-1] if r['error'] else ''}`")
    if errors:
        w("")

    # ---------------------------------------------------------------- views vs plain
    lines.extend(views_section(crit, compare))

    # ---------------------------------------------------------------- live
    w("## Live: draining a slot (`benches/live.py`)")
    w("")
    if not live or not live.get("medians"):
        w("Not run.")
    else:
        med = live["medians"]
        w(f"{live['changes']:,} inserts (pgbench_accounts' shape) in transactions of 10,000; "
          f"one slot per consumer and repetition, all made before the workload; protocol 1, "
          f"text; median of {live['reps']} repetitions, consumers interleaved in rotated order. "
          "CPU: the client process's user+sys time, and the server process's that decoded for "
          "it (walsender; for `sql_peek`, the backend running "
          "`pg_logical_slot_get_binary_changes`, with no client and no network). Server busy = "
          "its CPU time ÷ the wall time: near 100% the server is the limit. Client waits = the "
          "client's voluntary context switches (it slept on an empty socket, and the server's next "
          "send had to wake it: the server's CPU per change grows with them). The ratio to "
          "pg_recvlogical depends on the cores the run gets: benches/findings.md, \"The live "
          "drain against pg_recvlogical\". Every run drained "
          "its slot (checked by peeking it afterwards) unless listed below.")
        w("")
        base = med.get("pg_recvlogical", {}).get("changes_per_s")
        w("| consumer | median s | changes/s | ÷ pg_recvlogical | client CPU s | server CPU s | server busy | client waits |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|")
        for c, v in med.items():
            ratio = f"{v['changes_per_s'] / base:.2f}" if base else "–"
            cpu = (f"{v['client_cpu_s']:.2f} | {v['server_cpu_s']:.2f} | {v['server_busy']:.0%}"
                   if "server_cpu_s" in v else "– | – | –")
            cpu += f" | {v['client_waits']:,.0f}" if "client_waits" in v else " | –"
            w(f"| {c} | {v['median_s']:.2f} | {v['changes_per_s']:,.0f} | {ratio} | {cpu} |")
        w("")
        errs = [r for r in live.get("results", []) if "error" in r]
        for r in errs:
            w(f"- {r['consumer']} rep {r['rep']} failed: `{r['error'].strip().splitlines()[-1]}`")
        if errs:
            w("")
        ours = med.get("pgoutput_arrow", {}).get("changes_per_s")
        targets[f"live ≥ {LIVE_TARGET:.0%} of pg_recvlogical"] = Target(
            ours / base if ours and base else None, LIVE_TARGET, "%")

    # ---------------------------------------------------------------- Delta
    delta = load_json(data / "delta.json")
    w("## Live into Delta Lake and Iceberg (`benches/delta_sink.py`)")
    w("")
    if not delta or not delta.get("medians"):
        w("Not run.")
    else:
        w(f"{delta['changes']:,} changes of a pgbench-shaped table (half inserts in transactions "
          "of 10,000, half balance updates of random accounts in transactions of 100), one slot "
          "per consumer and repetition; `pgoutput-dump` timed as a whole process (start-up "
          f"included), `--commit-interval 1`; median of {delta['reps']} repetitions.")
        w("")
        w("| consumer | median s | changes/s | time ÷ pg_recvlogical's |")
        w("|---|---:|---:|---:|")
        for c, v in delta["medians"].items():
            ratio = f"{v['time_vs_pg_recvlogical']:.1f}" if "time_vs_pg_recvlogical" in v else "–"
            w(f"| {c} | {v['median_s']:.2f} | {v['changes_per_s']:,.0f} | {ratio} |")
        w("")
        errs = [r for r in delta.get("results", []) if "error" in r]
        for r in errs:
            w(f"- {r['consumer']} rep {r['rep']} failed: `{r['error'].strip().splitlines()[-1]}`")
        if errs:
            w("")

    # ---------------------------------------------------------------- CLI
    w("## pgoutput-dump drained to /dev/null (`benches/cli_drain.py`)")
    w("")
    if not cli or not cli.get("results"):
        w("Not run.")
    else:
        w(f"{Path(cli['capture']).name}: {cli['bytes'] / 1e6:.0f} MB, {cli['changes']:,} changes; "
          f"median (min–max) of {cli['runs']} runs. CPU = the process's user+sys time: on this "
          "shared machine the wall time also counts waits for a core. Peak RSS from `wait4`.")
        w("")
        w("| command | format | wall s | changes/s | CPU s | changes per CPU s | peak RSS MB |")
        w("|---|---|---:|---:|---:|---:|---:|")
        for r in cli["results"]:
            t, c, m = r["seconds"], r["cpu_seconds"], r["peak_rss_bytes"]
            w(f"| {r['command']} | {r['format']} | {r['median_s']:.2f} ({min(t):.2f}–{max(t):.2f}) "
              f"| {r['changes_per_s']:,.0f} | {r['median_cpu_s']:.2f} ({min(c):.2f}–{max(c):.2f}) "
              f"| {r['changes_per_cpu_s']:,.0f} | {r['median_peak_rss_bytes'] / 1e6:.0f} "
              f"({min(m) / 1e6:.0f}–{max(m) / 1e6:.0f}) |")
        w("")
        jsonl = [r for r in cli["results"] if r["format"] == "jsonl"]
        if jsonl:
            last = jsonl[-1]
            targets["pgoutput-dump jsonl ≥ 1 M changes/s (wall)"] = Target(
                last["changes_per_s"], 1e6, "changes/s")
            targets["pgoutput-dump jsonl ≥ 1 M changes per CPU second"] = Target(
                last["changes_per_cpu_s"], 1e6, "changes per CPU s")
            targets["pgoutput-dump jsonl peak RSS < 500 MB"] = Target(
                max(last["peak_rss_bytes"]) / 1e6, 500, "MB", below=True)

    # ---------------------------------------------------------------- Spark
    spark_lines, _ = spark_section(data)
    lines.extend(spark_lines)
    stream_lines, stream_targets = stream_section(data)
    lines.extend(stream_lines)
    targets.update(stream_targets)

    # ---------------------------------------------------------------- targets
    w("## Targets (issue 7)")
    w("")
    w("| target | this run | result |")
    w("|---|---:|---|")
    for name, t in targets.items():
        w(f"| {name} | {t.text(t.measured)} | {verdict(t.ok)} |")
    w("")
    met = [n for n, t in targets.items() if t.ok]
    missed = [n for n, t in targets.items() if t.ok is False]
    measured = [t for t in targets.values() if t.ok is not None]
    w(f"This run meets {len(met)} of the {len(measured)} targets it measured"
      + (f" and misses {len(missed)}: " + "; ".join(
          f"{n} ({targets[n].text(targets[n].measured)})" for n in missed) if missed else "")
      + ".")
    w("")
    # ---------------------------------------------------------------- profile
    profiles = sorted(data.glob("profile-*.txt"))
    if profiles:
        w("## Where the decoder's time goes (perf, this run)")
        w("")
        w("`perf record -e cpu-clock` of the criterion decode benchmark (`benches/run.sh`, step "
          "`profile`); self time per function, the top 15.")
        w("")
        for prof in profiles:
            rows = [ln.split() for ln in prof.read_text().splitlines() if "%" in ln][:15]
            w(f"**decode/{prof.stem[len('profile-'):]}**")
            w("")
            w("| self | function |")
            w("|---:|---|")
            for parts in rows:
                # "12.3%  [.] symbol  -  -": the percentage, then the symbol after the [.] mark.
                sym = " ".join(p for p in parts[2:] if p != "-")
                w(f"| {parts[0]} | `{sym}` |")
            w("")
    if Path(__file__).with_name("findings.md").is_file():
        w("Analyses of the profiles and of the targets, with the numbers of the runs they were "
          "made in (not this one's): [benches/findings.md](benches/findings.md).")
        w("")
    if args.previous:
        lines = keep_previous(lines, Path(args.previous))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
