"""Writes the browser explorer's measured budgets (budgets.json of site/e2e/e2e.mjs) into
BENCHMARKS.md, between its own markers (the section is created if missing; other sections are
left as they are).

usage: benchmarks.py budgets.json BENCHMARKS.md COMMAND SECONDS
"""
import datetime
import json
import os
import subprocess
import sys

from distill_tools.benchmarks_md import write_section
from distill_tools.machine import summary as machine_summary

START, END = "<!-- browser-explorer:start -->", "<!-- browser-explorer:end -->"


def first_line(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        return "unknown"


def main():
    budgets_path, bench_path, command, seconds = sys.argv[1:5]
    b = json.load(open(budgets_path))
    kb = lambda n: f"{n / 1000:.1f} KB"
    verdict = lambda ok: "within" if ok else "**over**"
    rows = [
        ("site wasm, gzip level 9 (dist/explorer-*_bg.wasm)", kb(b["site_wasm_gzip_bytes"]), "<= 250 KB",
         verdict(b["site_wasm_gzip_bytes"] <= 250_000)),
        ("site wasm, brotli -q 11 (what most static hosts serve)", kb(b["site_wasm_brotli_bytes"]), "", ""),
        ("site wasm, raw", kb(b["site_wasm_bytes"]), "", ""),
        ("app files, gzip level 9 (html, css, js, wasm)", kb(b["site_total_gzip_bytes"]), "", ""),
        ("embed package wasm, gzip level 9 (dist/embed/estimator_wasm_bg.wasm)", kb(b["embed_wasm_gzip_bytes"]), "", ""),
        ("navigation to first numbers (median of 5 loads, performance.now)", f"{b['first_numbers_ms']:.0f} ms", "", ""),
        ("navigation to first numbers (wall clock, first load)", f"{b['first_numbers_wall_ms']:.0f} ms", "", ""),
        ("full sweep after an input change: estimator (median / max of 40)",
         f"{b['sweep_ms_median']:.1f} / {b['sweep_ms_max']:.1f} ms", "< 16 ms", verdict(b["sweep_ms_median"] < 16)),
        ("input change to updated DOM: sweep + render (median / max of 40)",
         f"{b['recompute_dom_ms_median']:.1f} / {b['recompute_dom_ms_max']:.1f} ms", "< 16 ms",
         verdict(b["recompute_dom_ms_median"] < 16)),
        ("figures on the page checked against the native estimator", str(b["figures_compared"]), "", ""),
    ]
    load = os.getloadavg()[0]
    machine = (f"{machine_summary()}, load average {load:.1f} at the end (the machine may be shared); "
               f"{first_line(['chromium', '--version'])} headless")
    lines = [
        START,
        "## Browser explorer",
        "",
        f"Measured by `{command}` (site/e2e/e2e.mjs) on {datetime.date.today().isoformat()}, {machine}; "
        f"the whole script took {seconds} s. A full sweep prices 5 student sizes, a memory-against-batch curve, "
        "the largest batch on 16 GPUs and 6 levers (12 compiled models, each priced at several batches) for the "
        "default form (GPT-2 teacher, 6-layer student, RTX-4090); the first row counts the estimator only "
        "(`data-sweep-ms`), the second the input event to the updated DOM.",
        "",
        "| budget | measured | target | |",
        "|---|---|---|---|",
        *[f"| {name} | {value} | {target} | {ok} |" for name, value, target, ok in rows],
        END,
    ]
    section = "\n".join(lines)
    write_section(bench_path, section, START, END)
    print(section)


if __name__ == "__main__":
    main()
