"""Builds the estimator's ground-truth fixture from recorded CUDA runs.

For each run: its config.toml as distill wrote it (file paths made relative to the repository,
the text subsets the GPU host trained on named by --data), the measured peak allocated and
reserved bytes from its report.json, and the data statistics the plan takes (datasets' sizes,
text batch widths) as `distill plan --json` computes them from the same files.

usage: make_truth_fixture.py DISTILL LOGS_DIR OUT_DIR NAME=RUN_SUBDIR[:KEY=VALUE,...] ...
(KEY=VALUE: --set overrides for the plan only, e.g. the data files the GPU host had)
"""
import json
import re
import subprocess
import sys
from pathlib import Path

distill, logs, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)
rows = []
for spec in sys.argv[4:]:
    name, rest = spec.split("=", 1)
    sub, _, overrides = rest.partition(":")
    run = logs / sub
    report = json.loads((run / "report.json").read_text())
    cfg = re.sub(r'"(/tmp/w2?/p|' + re.escape(str(Path.cwd())) + ')/', '"', (run / "config.toml").read_text())
    (out / f"{name}.toml").write_text(cfg)
    sets = [a for kv in overrides.split(",") if kv for a in ("--set", f'data.{kv.split("=")[0]}="{kv.split("=", 1)[1]}"')]
    mem = report["memory"]
    if not re.search(r"^(preset|arch)\s*=", cfg, re.M):
        sets += ["--set", f"teacher.params={report['teacher']['params']}"]
    # the copied cfg's paths are relative to the repository: the plan reads an absolute copy
    tmp = out / f".{name}.plan.toml"
    tmp.write_text(re.sub(r'"(tests|data|examples)/', lambda m: '"' + str(Path.cwd() / m.group(1)) + "/", cfg))
    plan = subprocess.run([distill, "plan", "--student", str(tmp), "--json", "--gpu", "H200",
                           "--batch", str(mem["batch"]), *sets], capture_output=True, text=True)
    tmp.unlink()
    if plan.returncode:
        sys.exit(f"{name}: distill plan failed: {plan.stderr}")
    data = json.loads(plan.stdout)["data"]
    if data["dataset"] is None:
        sys.exit(f"{name}: distill plan could not read the data files: give them with NAME=RUN:train=...,test=...")
    rows.append((name, sub, report, data))

lines = []
for name, sub, report, data in rows:
    mem, d, t = report["memory"], data["dataset"], data["text"]
    lines += [f"[[run]]", f'name = "{name}"', f'recorded_as = "{sub}"', f"batch = {mem['batch']}",
              f"teacher_params = {report['teacher']['params']}",
              f"train_samples = {d['train_samples']}", f"test_samples = {d['test_samples']}",
              f"sample_bytes = {d['sample_bytes']}"]
    if t:
        lines += [f"text_train = {json.dumps(t['train'])}", f"text_teacher_pass = {json.dumps(t['teacher_pass'])}",
                  f"text_evaluation = {json.dumps(t['evaluation'])}"]
    lines += [f"measured_peak_allocated_bytes = {mem['measured_peak_allocated_bytes']}",
              f"measured_peak_reserved_bytes = {mem['measured_peak_reserved_bytes']}",
              f"predicted_allocated_bytes_before = {mem['predicted_allocated_bytes']}", ""]
(out / "runs.toml").write_text("\n".join(lines))
print("\n".join(lines))
