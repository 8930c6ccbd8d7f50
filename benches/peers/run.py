#!/usr/bin/env python3
"""Run the peer comparison suite and write its table and charts into the docs.

The suite (this directory, a Cargo workspace of its own) has one harness per membership library:
convoke, memberlist, foca and chitchat. Each starts N nodes in one process, waits for them to
converge, counts steady-state traffic, stops one node and waits for the others to see it gone, and
prints one JSON line (the `Report` of `common/src/lib.rs`). This script builds the harnesses,
runs them one after another (never in parallel, so they do not compete for the cores), and
writes:

* `docs/benchmarks/peers-raw.jsonl`: every JSON line the harnesses printed (one per run, plus an
  error row for a run that crashed, timed out or printed no JSON), after a first `{"meta": ...}`
  line recording the date, core count and command line, so the docs can be regenerated later;
* the table between the lines `<!-- peers-table:start -->` and `<!-- peers-table:end -->` of
  `docs/benchmarks.md` (the file and both markers must exist; the script never creates them);
* `docs/benchmarks/{convergence,detection,memory,bandwidth}.svg`: one line chart per metric,
  against N.

Usage (from anywhere; default paths are relative to the repository root):

    python3 benches/peers/run.py                       # build, run N = 25,100,250 for all four
    python3 benches/peers/run.py --runs 3              # median of three runs per cell
    python3 benches/peers/run.py --nodes 25 --libraries convoke,foca --steady-secs 5
    python3 benches/peers/run.py --no-build --target-dir /some/cargo/target
    python3 benches/peers/run.py --from-raw docs/benchmarks/peers-raw.jsonl   # redo docs only

Options:
    --nodes LIST         comma-separated node counts (default 25,100,250; each at least 2)
    --libraries LIST     comma-separated, from convoke,memberlist,foca,chitchat (default: all four)
    --runs R             runs per (N, library); the table shows the median of each figure over
                         the runs that measured it (default 1)
    --steady-secs S      passed to the harnesses (default 10)
    --timeout-secs T     passed to the harnesses, per phase (default 180); a harness still running
                         after T*4+60 s is killed and recorded as an error
    --no-build           do not run cargo build first
    --target-dir DIR     cargo target directory (default: $CARGO_TARGET_DIR if set, else
                         benches/peers/target); the binaries are DIR/release/<library>-harness
    --from-raw FILE      build and run nothing: regenerate the table and charts from a raw JSONL
                         file written by an earlier run
    --doc PATH           the Markdown file holding the markers (default docs/benchmarks.md)
    --charts-dir DIR     where the charts and the raw JSONL go (default docs/benchmarks)

Figures a harness could not measure are null in its JSON and "—" in the table; a zero RSS is read
as "not measured" (a run that never converged has none). A harness error does not stop the suite
and does not make the exit status non-zero: the row says what went wrong. The exit status is 2 on
a usage error or when the doc or its markers are missing, and 1 if cargo build fails.

Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from xml.sax.saxutils import escape

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "benches" / "peers"
LIBRARIES = ["convoke", "memberlist", "foca", "chitchat"]
START_MARKER = "<!-- peers-table:start -->"
END_MARKER = "<!-- peers-table:end -->"
RAW_NAME = "peers-raw.jsonl"
NUMERIC_FIELDS = [
    "convergence_s",
    "convergence_up_s",
    "failure_detected_s",
    "rss_before_bytes",
    "rss_converged_bytes",
    "rss_after_failure_bytes",
    "rss_per_node_bytes",
    "steady_bytes_per_s_per_node",
]
DASH = "—"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def usage_error(parser: argparse.ArgumentParser, message: str):
    parser.print_usage(sys.stderr)
    log(f"run.py: error: {message}")
    sys.exit(2)


# --- command line ------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benches/peers/run.py",
        description="Run the peer comparison suite; write its table and charts into the docs.",
        epilog="See the docstring at the top of benches/peers/run.py for details.",
    )
    parser.add_argument("--nodes", default="25,100,250", help="comma-separated node counts")
    parser.add_argument("--libraries", default=",".join(LIBRARIES), help="comma-separated")
    parser.add_argument("--runs", type=int, default=1, help="runs per (N, library)")
    parser.add_argument("--steady-secs", type=int, default=10)
    parser.add_argument("--timeout-secs", type=int, default=180)
    parser.add_argument("--no-build", action="store_true", help="skip cargo build")
    parser.add_argument("--target-dir", help="cargo target directory (CARGO_TARGET_DIR)")
    parser.add_argument("--from-raw", metavar="FILE", help="regenerate docs from a raw JSONL")
    parser.add_argument("--doc", help="Markdown file with the markers (default docs/benchmarks.md)")
    parser.add_argument("--charts-dir", help="charts and raw JSONL (default docs/benchmarks)")
    args = parser.parse_args(argv)

    try:
        args.nodes = [int(n) for n in args.nodes.split(",") if n.strip()]
    except ValueError:
        usage_error(parser, f"--nodes expects comma-separated whole numbers, got {args.nodes!r}")
    if not args.nodes or any(n < 2 for n in args.nodes):
        usage_error(parser, "--nodes needs at least one count, each at least 2")
    args.libraries = [lib.strip() for lib in args.libraries.split(",") if lib.strip()]
    unknown = [lib for lib in args.libraries if lib not in LIBRARIES]
    if not args.libraries or unknown:
        usage_error(parser, f"--libraries takes names from {','.join(LIBRARIES)}; got {unknown}")
    if args.runs < 1:
        usage_error(parser, "--runs must be at least 1")
    if args.steady_secs < 0 or args.timeout_secs < 1:
        usage_error(parser, "--steady-secs must be >= 0 and --timeout-secs >= 1")
    if args.from_raw:
        args.from_raw = Path(args.from_raw).resolve()
        if not args.from_raw.is_file():
            usage_error(parser, f"--from-raw: no such file {args.from_raw}")
    args.doc = Path(args.doc).resolve() if args.doc else REPO / "docs" / "benchmarks.md"
    args.charts_dir = (
        Path(args.charts_dir).resolve() if args.charts_dir else REPO / "docs" / "benchmarks"
    )
    if args.target_dir:
        args.target_dir = Path(args.target_dir).resolve()
    elif os.environ.get("CARGO_TARGET_DIR"):
        args.target_dir = Path(os.environ["CARGO_TARGET_DIR"]).resolve()
    else:
        args.target_dir = SUITE / "target"
    return args


def command_line(argv: list[str]) -> str:
    """The command as one would type it at the repository root."""
    return shlex.join(["python3", "benches/peers/run.py", *argv])


# --- the doc -----------------------------------------------------------------------------------


def check_doc(doc: Path) -> str:
    """Returns the doc's text, or exits with status 2 if it or its markers are missing."""
    problem = None
    if not doc.is_file():
        problem = f"{doc} does not exist"
    else:
        text = doc.read_text(encoding="utf-8")
        lines = text.splitlines()
        starts = [i for i, line in enumerate(lines) if line.strip() == START_MARKER]
        ends = [i for i, line in enumerate(lines) if line.strip() == END_MARKER]
        if len(starts) != 1 or len(ends) != 1 or starts[0] > ends[0]:
            problem = f"{doc} does not hold exactly one of each marker line, start before end"
    if problem:
        log(
            f"run.py: {problem}.\nThe table goes between these two lines of {doc}, which must "
            f"exist before the script runs (it does not create the doc):\n"
            f"    {START_MARKER}\n    {END_MARKER}"
        )
        sys.exit(2)
    return text


def replace_between_markers(text: str, block: str) -> str:
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == START_MARKER)
    end = next(i for i, line in enumerate(lines) if line.strip() == END_MARKER)
    return "".join(lines[: start + 1]) + block + "".join(lines[end:])


# --- building and running ----------------------------------------------------------------------


def build(libraries: list[str], target_dir: Path) -> None:
    command = ["cargo", "build", "--release", "--manifest-path", "benches/peers/Cargo.toml"]
    for lib in libraries:
        command += ["-p", f"{lib}-harness"]
    log(f"building: {shlex.join(command)} (CARGO_TARGET_DIR={target_dir})")
    env = dict(os.environ, CARGO_TARGET_DIR=str(target_dir))
    try:
        status = subprocess.run(command, cwd=REPO, env=env).returncode
    except OSError as e:
        log(f"run.py: cannot run cargo: {e}")
        sys.exit(1)
    if status != 0:
        log(f"run.py: cargo build failed with status {status}; nothing was run")
        sys.exit(1)


def error_row(library: str, nodes: int, message: str) -> dict:
    """The row recorded for a run that produced no report."""
    row = {"library": library, "version": None, "nodes": nodes}
    row.update({field: None for field in NUMERIC_FIELDS})
    row.update({"failure_means": "", "settings": "", "error": message})
    return row


def run_harness(binary: Path, library: str, nodes: int, steady: int, timeout: int) -> dict:
    """Runs one harness, echoing its progress; returns its report or an error row."""
    if not binary.is_file():
        return error_row(library, nodes, f"harness binary not found: {binary}")
    command = [str(binary), "--nodes", str(nodes), "--steady-secs", str(steady),
               "--timeout-secs", str(timeout)]
    # A session of its own, so a timeout (or ^C here) kills the harness and anything it started.
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
    except OSError as e:
        return error_row(library, nodes, f"cannot start {binary}: {e}")
    stdout: list[str] = []
    stderr_tail: collections.deque[str] = collections.deque(maxlen=3)

    def echo_stderr():
        for line in process.stderr:
            stderr_tail.append(line.rstrip())
            log(f"    | {line.rstrip()}")

    readers = [
        threading.Thread(target=echo_stderr, daemon=True),
        threading.Thread(target=lambda: stdout.extend(process.stdout), daemon=True),
    ]
    for reader in readers:
        reader.start()
    limit = timeout * 4 + 60
    timed_out = False
    try:
        status = process.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, signal.SIGKILL)
        status = process.wait()
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    for reader in readers:
        reader.join(timeout=5)

    report = None
    for line in reversed(stdout):
        try:
            candidate = json.loads(line)
        except ValueError:
            continue
        if isinstance(candidate, dict) and "library" in candidate:
            report = candidate
            break
    if timed_out:
        problem = f"killed after {limit} s (the subprocess timeout)"
    elif status != 0:
        problem = f"harness exited with status {status}"
    else:
        problem = None
    if report is None:
        problem = problem or "harness exited with status 0"
        tail = "; ".join(stderr_tail)
        return error_row(library, nodes, f"{problem} and printed no JSON report"
                         + (f" (last stderr: {tail})" if tail else ""))
    if problem:
        report["error"] = f"{report['error']}; {problem}" if report.get("error") else problem
    return report


def run_suite(args: argparse.Namespace, raw_path: Path, meta: dict) -> list[dict]:
    """Runs every (N, library) `--runs` times, appending each report to the raw file."""
    rows = []
    total = len(args.nodes) * len(args.libraries) * args.runs
    done = 0
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    with raw_path.open("w", encoding="utf-8") as raw:
        raw.write(json.dumps({"meta": meta}) + "\n")
        for nodes in args.nodes:
            for library in args.libraries:
                binary = args.target_dir / "release" / f"{library}-harness"
                for run in range(1, args.runs + 1):
                    done += 1
                    log(f"[{done}/{total}] {library}, N = {nodes}, run {run}/{args.runs}")
                    began = time.monotonic()
                    row = run_harness(binary, library, nodes, args.steady_secs, args.timeout_secs)
                    log(f"[{done}/{total}] {library}, N = {nodes}: {time.monotonic() - began:.1f} s"
                        f"; {summary(row)}")
                    rows.append(row)
                    raw.write(json.dumps(row) + "\n")
                    raw.flush()
    return rows


def summary(row: dict) -> str:
    parts = [f"{name} {seconds(row.get(field))} s" for name, field in
             [("convergence", "convergence_s"), ("all Up", "convergence_up_s"),
              ("failure seen", "failure_detected_s")] if row.get(field) is not None]
    if row.get("error"):
        parts.append(f"error: {row['error']}")
    return ", ".join(parts) or "nothing measured"


def read_raw(path: Path) -> tuple[dict | None, list[dict]]:
    """The meta line (if any) and the reports of a raw JSONL file."""
    meta, rows = None, []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            log(f"{path}:{number}: not JSON, skipped")
            continue
        if isinstance(record, dict) and "meta" in record:
            meta = record["meta"]
        elif isinstance(record, dict) and "library" in record and "nodes" in record:
            rows.append(record)
        else:
            log(f"{path}:{number}: not a harness report, skipped")
    return meta, rows


# --- aggregating -------------------------------------------------------------------------------


def measured(row: dict, field: str) -> float | None:
    """A numeric field of a report, or None when the run did not measure it."""
    value = row.get(field)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    if field.startswith("rss_") and field != "rss_before_bytes":
        # An RSS of 0 means the phase was never reached (the Report's initial value).
        if value == 0 or (field == "rss_per_node_bytes" and not row.get("rss_converged_bytes")):
            return None
    return float(value)


def aggregate(rows: list[dict]) -> list[dict]:
    """One row per (N, library): medians of the measured figures, errors gathered as notes."""
    groups: dict[tuple[int, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["nodes"], row["library"]), []).append(row)
    order = {lib: i for i, lib in enumerate(LIBRARIES)}
    result = []
    for (nodes, library), runs in sorted(
        groups.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], len(order)), kv[0][1])
    ):
        cell = {"nodes": nodes, "library": library, "runs": len(runs)}
        for field, missing in (("version", None), ("failure_means", ""), ("settings", "")):
            cell[field] = next((r[field] for r in runs if r.get(field)), missing)
        for field in NUMERIC_FIELDS:
            values = [v for v in (measured(r, field) for r in runs) if v is not None]
            cell[field] = statistics.median(values) if values else None
        ratios = [
            after / converged
            for after, converged in (
                (measured(r, "rss_after_failure_bytes"), measured(r, "rss_converged_bytes"))
                for r in runs
            )
            if after is not None and converged is not None
        ]
        cell["rss_ratio"] = statistics.median(ratios) if ratios else None
        errors = collections.Counter(r["error"] for r in runs if r.get("error"))
        notes = []
        for message, count in errors.items():
            prefix = f"{count} of {len(runs)} runs: " if len(runs) > 1 else ""
            notes.append(prefix + message)
        cell["notes"] = "; ".join(notes)
        result.append(cell)
    return result


# --- the table ---------------------------------------------------------------------------------


def seconds(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}"


def whole(value: float | None) -> str:
    return DASH if value is None else f"{round(value)}"


def markdown_text(text: str) -> str:
    """One line of plain text, safe inside Markdown (no raw HTML, no table breaks)."""
    text = " ".join(text.split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|") or DASH


def table(cells: list[dict], meta: dict | None, regenerated_with: str | None) -> str:
    runs = max((c["runs"] for c in cells), default=1)
    if meta:
        header = (f"Measured on {meta.get('date', '?')} on a machine with "
                  f"{meta.get('cpus', '?')} cores, with `{meta.get('command', '?')}`")
        if runs > 1:
            header += f"; each figure the median of up to {runs} runs"
        if regenerated_with:
            header += f" (table regenerated with `{regenerated_with}`)"
    else:  # a raw file without its meta line: say what is known
        header = (f"Regenerated on {datetime.date.today().isoformat()} (machine with "
                  f"{os.cpu_count()} cores) with `{regenerated_with}`, from reports whose run "
                  f"was not recorded")
        if runs > 1:
            header += f"; each figure the median of up to {runs} runs"
    lines = [
        "",
        header + ".",
        "",
        "| N | library (version) | convergence: all seen as members (s) | convoke: all Up (s) "
        "| failure seen by all (s) | RSS per node (kB) | RSS after failure / converged "
        "| steady B/s per node | notes |",
        "|--:|---|--:|--:|--:|--:|--:|--:|---|",
    ]
    for c in cells:
        name = f"{c['library']} ({c['version']})" if c["version"] else c["library"]
        kb = None if c["rss_per_node_bytes"] is None else c["rss_per_node_bytes"] / 1024
        ratio = DASH if c["rss_ratio"] is None else f"{c['rss_ratio']:.2f}"
        lines.append(
            f"| {c['nodes']} | {markdown_text(name)} | {seconds(c['convergence_s'])} "
            f"| {seconds(c['convergence_up_s'])} | {seconds(c['failure_detected_s'])} "
            f"| {whole(kb)} | {ratio} | {whole(c['steady_bytes_per_s_per_node'])} "
            f"| {markdown_text(c['notes'])} |"
        )
    described = {}
    for c in cells:
        if c["library"] not in described and (c["failure_means"] or c["settings"]):
            described[c["library"]] = c
    if described:
        lines += ["", "What \"failure seen\" means, and the settings each harness used:", ""]
        for library, c in described.items():
            lines.append(
                f"- {library}: failure = {markdown_text(c['failure_means'])}; "
                f"settings: {markdown_text(c['settings'])}"
            )
    return "\n".join(lines) + "\n\n"


# --- the charts --------------------------------------------------------------------------------

COLOURS = {
    "convoke": "#1f5fbf",
    "convoke (members)": "#1f5fbf",
    "convoke (all Up)": "#12a4b8",
    "memberlist": "#d62728",
    "foca": "#2ca02c",
    "chitchat": "#ff8c00",
}
SPARE_COLOURS = ["#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def nice_step(span: float, ticks: int = 5) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving about `ticks` intervals."""
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * 0.999)


def tick_label(value: float) -> str:
    value = float(f"{value:.10g}")
    if abs(value) >= 10000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def svg_line_chart(title: str, y_label: str, xs: list[int],
                   series: list[tuple[str, dict[int, float]]], x_label: str = "nodes (N)") -> str:
    """A ~640x360 SVG line chart: one line with point markers per (name, {x: y}) series."""
    width, height = 640, 360
    left, right, top, bottom = 70, 440, 44, 300  # the plot area; the legend sits to its right
    xs = sorted(set(xs))
    values = [y for _, points in series for y in points.values()]
    y_top = max(values, default=0) or 1.0
    step = nice_step(y_top)
    y_top = math.ceil(y_top / step - 1e-9) * step

    def px(x: float) -> float:
        if len(xs) == 1:
            return (left + right) / 2
        pad = (right - left) * 0.05
        return left + pad + (x - xs[0]) / (xs[-1] - xs[0]) * (right - left - 2 * pad)

    def py(y: float) -> float:
        return bottom - y / y_top * (bottom - top)

    def text(x, y, content, **attrs):
        extra = "".join(f' {k.replace("_", "-")}="{escape(str(v), {chr(34): "&quot;"})}"'
                        for k, v in attrs.items())
        return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{escape(content)}</text>'

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        text(width / 2, 24, title, text_anchor="middle", font_size=15, font_weight="bold"),
    ]
    for i in range(round(y_top / step) + 1):
        y = i * step
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{right}" y2="{py(y):.1f}" '
                   f'stroke="#e0e0e0"/>')
        out.append(text(left - 6, py(y) + 4, tick_label(y), text_anchor="end", fill="#333"))
    for x in xs:
        out.append(f'<line x1="{px(x):.1f}" y1="{bottom}" x2="{px(x):.1f}" y2="{bottom + 5}" '
                   f'stroke="#333"/>')
        out.append(text(px(x), bottom + 18, str(x), text_anchor="middle", fill="#333"))
    out.append(f'<polyline points="{left},{top} {left},{bottom} {right},{bottom}" fill="none" '
               f'stroke="#333"/>')
    out.append(text((left + right) / 2, bottom + 40, x_label, text_anchor="middle"))
    out.append(text(18, (top + bottom) / 2, y_label, text_anchor="middle",
                    transform=f"rotate(-90 18 {(top + bottom) / 2:.1f})"))

    spare = iter(SPARE_COLOURS * 4)
    for index, (name, points) in enumerate(series):
        colour = COLOURS.get(name) or next(spare, "#000000")
        dash = ' stroke-dasharray="6 3"' if "all Up" in name else ""
        ordered = [(x, points[x]) for x in xs if x in points]
        if len(ordered) > 1:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in ordered)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                       f'stroke-width="2"{dash}/>')
        for x, y in ordered:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{colour}">'
                       f"<title>{escape(f'{name}, N = {x}: {y:.6g}')}</title></circle>")
        legend_y = top + 8 + index * 20
        out.append(f'<line x1="{right + 16}" y1="{legend_y}" x2="{right + 40}" y2="{legend_y}" '
                   f'stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<circle cx="{right + 28}" cy="{legend_y}" r="3.5" fill="{colour}"/>')
        label = name if ordered else f"{name} (no data)"
        out.append(text(right + 46, legend_y + 4, label))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_charts(cells: list[dict], charts_dir: Path) -> list[Path]:
    xs = sorted({c["nodes"] for c in cells})
    libraries = list(dict.fromkeys(c["library"] for c in cells))

    def points(library: str, field: str, scale: float = 1.0) -> dict[int, float]:
        return {c["nodes"]: c[field] / scale for c in cells
                if c["library"] == library and c[field] is not None}

    convergence = []
    for library in libraries:
        if library == "convoke":
            convergence.append(("convoke (members)", points(library, "convergence_s")))
            convergence.append(("convoke (all Up)", points(library, "convergence_up_s")))
        else:
            convergence.append((library, points(library, "convergence_s")))
    charts = {
        "convergence.svg": ("Convergence: every node sees all N", "seconds", convergence),
        "detection.svg": ("Failure detection: every survivor sees the stopped node gone",
                          "seconds",
                          [(lib, points(lib, "failure_detected_s")) for lib in libraries]),
        "memory.svg": ("Memory: RSS per node once converged", "kB per node",
                       [(lib, points(lib, "rss_per_node_bytes", 1024)) for lib in libraries]),
        "bandwidth.svg": ("Steady-state traffic sent per node", "bytes/s per node",
                          [(lib, points(lib, "steady_bytes_per_s_per_node"))
                           for lib in libraries]),
    }
    charts_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, (title, y_label, series) in charts.items():
        path = charts_dir / file_name
        path.write_text(svg_line_chart(title, y_label, xs, series), encoding="utf-8")
        written.append(path)
    return written


# --- main --------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    doc_text = check_doc(args.doc)  # fail before a long run, not after it
    raw_path = args.charts_dir / RAW_NAME

    if args.from_raw:
        meta, rows = read_raw(args.from_raw)
        regenerated_with = command_line(argv)
        if meta is None:
            log(f"{args.from_raw} has no meta line: the table cannot say when or how it was run")
        if not rows:
            log(f"run.py: {args.from_raw} holds no harness reports; the table will be empty")
    else:
        meta = {"date": datetime.date.today().isoformat(), "cpus": os.cpu_count(),
                "command": command_line(argv)}
        regenerated_with = None
        if not args.no_build:
            build(args.libraries, args.target_dir)
        rows = run_suite(args, raw_path, meta)
        log(f"raw reports: {raw_path}")

    cells = aggregate(rows)
    args.doc.write_text(replace_between_markers(doc_text, table(cells, meta, regenerated_with)),
                        encoding="utf-8")
    log(f"table: {args.doc}")
    for path in write_charts(cells, args.charts_dir):
        log(f"chart: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
