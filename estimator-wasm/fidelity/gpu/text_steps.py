"""Records each recorded text run's training steps in its fixture: every batch of the first epoch
as [rows, width] (width: its longest sentence's tokens, the padding distill gives it), in the
order the trainer meets them, as `text_steps` in the session's runs.toml.

The steps are distill's own: `distill plan --json --gpu H200 --batch B` on the run's cfg prints
them (`data.text.steps`: `distill/src/inputs/data/widths.rs`, `step_widths`, the trainer's seeded,
length-bucketed order). The data are the recorded runs' (runs.toml's `data`): the MiniLM runs the
first 20,000 lines of data/minilm/train.txt (as bench/gpu/pack.sh cut them), data/minilm/test.txt
and data/minilm/tokenizer.json, built by scripts/prepare-text; text-fixture tests/fixtures/text/.
Before it writes anything, the script checks that the plan's statistics of those data are the
recorded ones (train and test samples, sample bytes, `text_train`, `text_teacher_pass`,
`text_evaluation`), and stops naming the first that differs.

usage: python estimator-wasm/fidelity/gpu/text_steps.py DISTILL   (from the repository root)
"""
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path.cwd()
HERE = Path(__file__).resolve().parent
PAIRS_PER_LINE = 12


def plan_data(distill, cfg, batch, sets):
    """`distill plan --json`'s `data` for `cfg` at `batch`, with `--set` overrides `sets`."""
    args = [distill, "plan", "--student", str(cfg), "--json", "--gpu", "H200", "--batch", str(batch)]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{cfg}: distill plan failed: {out.stderr}")
    return json.loads(out.stdout)["data"]


def data_sets(run, cfg_text, minilm):
    """The `--set` overrides that point `run`'s cfg at the data it trained on."""
    if run["name"].startswith("minilm"):
        return [f'data.{k}="{minilm / f}"' for k, f in
                (("train", "train.txt"), ("test", "test.txt"), ("tokenizer", "tokenizer.json"))]
    sets = [f'data.{k}="{ROOT / v}"' for k, v in re.findall(r'^(train|test|tokenizer) = "([^"]+)"', cfg_text, re.M)]
    if not re.search(r"^(preset|arch)\s*=", cfg_text, re.M):
        sets.append(f"teacher.params={run['teacher_params']}")
    return sets


def check(run, data):
    """Stops unless `data` (the plan's statistics) are those recorded for `run`."""
    d, t = data["dataset"], data["text"]
    got = {"train_samples": d["train_samples"], "test_samples": d["test_samples"],
           "sample_bytes": d["sample_bytes"], "text_train": t["train"],
           "text_teacher_pass": t["teacher_pass"], "text_evaluation": t["evaluation"]}
    for key, value in got.items():
        if run[key] != value:
            sys.exit(f"{run['name']}: the data give {key} = {value}, the recorded run {run[key]}: not its data")
    if sum(rows for rows, _ in t["steps"]) != run["train_samples"]:
        sys.exit(f"{run['name']}: the first epoch's steps do not cover the train set")


def toml_pairs(pairs):
    """`pairs` as a TOML array of [rows, width], PAIRS_PER_LINE to a line."""
    lines = [", ".join(f"[{r}, {w}]" for r, w in pairs[i:i + PAIRS_PER_LINE])
             for i in range(0, len(pairs), PAIRS_PER_LINE)]
    return "[\n  " + ",\n  ".join(lines) + ",\n]"


def write_steps(path, steps):
    """runs.toml at `path` with `text_steps` after each named run's `text_evaluation` line."""
    text = re.sub(r"\ntext_steps = \[\n(?:  [^\n]*\n)*\]", "", path.read_text())
    blocks = text.split("\n[[run]]\n")
    for i, block in enumerate(blocks[1:], 1):
        name = re.search(r'^name = "([^"]+)"', block, re.M).group(1)
        if name in steps:
            blocks[i] = re.sub(r"^(text_evaluation = .*)$", lambda m: m.group(1) + "\ntext_steps = " +
                               toml_pairs(steps[name]), block, count=1, flags=re.M)
    path.write_text("\n[[run]]\n".join(blocks))


def main():
    distill = sys.argv[1]
    train = ROOT / "data/minilm/train.txt"
    with tempfile.TemporaryDirectory() as tmp:
        minilm = Path(tmp)
        with open(train) as f:
            (minilm / "train.txt").write_text("".join(line for _, line in zip(range(20_000), f)))
        for name in ("test.txt", "tokenizer.json"):
            (minilm / name).write_bytes((ROOT / "data/minilm" / name).read_bytes())
        for runs in sorted(HERE.glob("*/runs.toml")):
            fixture = tomllib.loads(runs.read_text())
            steps = {}
            for run in fixture["run"]:
                if "text_train" not in run:
                    continue
                cfg = runs.parent / f"{run['name']}.toml"
                data = plan_data(distill, cfg, run["batch"], data_sets(run, cfg.read_text(), minilm))
                check(run, data)
                steps[run["name"]] = data["text"]["steps"]
                print(f"{runs.parent.name}/{run['name']}: {len(steps[run['name']])} steps, "
                      f"{len({w for _, w in steps[run['name']]})} widths", file=sys.stderr)
            write_steps(runs, steps)


if __name__ == "__main__":
    main()
