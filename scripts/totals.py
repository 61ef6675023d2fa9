"""One line of totals for scripts/test, read from the logs of its suites.

    python3 scripts/totals.py cargo=LOG python=LOG web=LOG ...

Each argument names a suite and the file holding its output (stdout and stderr together); a
missing or empty file is a suite that did not run (scripts/test stopped before it). A suite's
figures come from the lines its runner prints:

- cargo (`cargo test`): every `test result: ok. 5 passed; 0 failed; 2 ignored; ...` line, summed
  (ignored tests are the skipped ones; "filtered out" is a filter's choice, not counted);
- python (`python -m unittest`): `Ran N tests`, then `OK`, `OK (skipped=2)` or
  `FAILED (failures=1, errors=1, skipped=1)`; errors count as failures;
- web (scripts/test-web): its cargo runs (the explorer, the site, the wasm tests in Chromium) as "web cargo tests" and the last
  `N passed, M failed` line of site/e2e/e2e.mjs ("page checks").

A suite whose runner failed before printing its figures (a compile error) shows "did not
finish"; the script's exit status, not this line, says whether the run passed.
"""
import os
import re
import sys

CARGO = re.compile(r"^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored;", re.M)
RAN = re.compile(r"^Ran (\d+) tests? in ", re.M)
VERDICT = re.compile(r"^(OK|FAILED)(?: \(([^)]*)\))?\s*$", re.M)
PAGE = re.compile(r"^(\d+) passed, (\d+) failed$", re.M)

NAMES = {"cargo": "cargo tests", "python": "python unittest"}


def cargo(text):
    """(passed, failed, skipped) over every `test result:` line of `text`, or None when none."""
    rows = CARGO.findall(text)
    if not rows:
        return None
    return tuple(sum(int(r[i]) for r in rows) for i in range(3))


def unittest(text):
    """(passed, failed, skipped) of a unittest run's summary, or None when it printed none."""
    ran, verdict = RAN.findall(text), VERDICT.findall(text)
    if not ran or not verdict:
        return None
    counts = {}
    for part in filter(None, (p.strip() for p in verdict[-1][1].split(","))):
        key, _, value = part.partition("=")
        counts[key] = int(value)
    failed = counts.get("failures", 0) + counts.get("errors", 0) + counts.get("unexpected_successes", 0)
    skipped = counts.get("skipped", 0)
    total = int(ran[-1])
    return (total - failed - skipped, failed, skipped)


def pages(text):
    """(passed, failed, 0) of the page checks' last summary line, or None."""
    rows = PAGE.findall(text)
    return (int(rows[-1][0]), int(rows[-1][1]), 0) if rows else None


def figures(name, counts):
    if counts is None:
        return f"{name}: did not finish"
    return f"{name}: {counts[0]} passed, {counts[1]} failed, {counts[2]} skipped"


def totals(suites):
    """The line for `suites`, a list of (kind, text or None) in the order they ran."""
    parts = []
    for kind, text in suites:
        if kind == "web":
            names = ["web cargo tests", "page checks"]
            if not text:
                parts.extend(f"{n}: not run" for n in names)
                continue
            parts.append(figures(names[0], cargo(text)))
            parts.append(figures(names[1], pages(text)))
            continue
        name = NAMES[kind]
        if not text:
            parts.append(f"{name}: not run")
            continue
        parts.append(figures(name, cargo(text) if kind == "cargo" else unittest(text)))
    return "totals: " + "; ".join(parts)


def main(args):
    suites = []
    for arg in args:
        kind, _, path = arg.partition("=")
        if kind not in ("cargo", "python", "web"):
            raise SystemExit(f"totals.py: unknown suite {kind!r} (cargo, python or web)")
        text = None
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read() or None
        suites.append((kind, text))
    print(totals(suites))


if __name__ == "__main__":
    main(sys.argv[1:])
