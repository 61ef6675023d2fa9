"""The one writer of a BENCHMARKS.md section: each benchmark owns the text between its own two
marker lines (HTML comments, invisible in the rendered page) and rewrites only that."""
import os


def write_section(path: str, text: str, start: str, end: str) -> None:
    """Puts `text` (which begins with the marker `start` and ends with `end`) in place of the
    section between those markers in `path`, or appends it after a blank line when the markers
    are missing; a missing file starts as `# Benchmarks`. Other sections are left as they are.
    Errors: OSError when `path` cannot be read or written."""
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else "# Benchmarks\n"
    if start in old and end in old:
        new = old[: old.index(start)] + text + old[old.index(end) + len(end) :]
    else:
        new = old.rstrip("\n") + "\n\n" + text + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
