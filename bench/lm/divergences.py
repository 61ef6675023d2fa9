"""The causal-LM benchmark of the soft term's divergence, written into BENCHMARKS.md between the
`lm-divergences` markers and into OUT/bench.json. Called by `scripts/bench-lm-divergences`, which
makes the runs it reads.

RUN...: finished `distill` runs of one cfg that differ only in `kd.divergence` (and `kd.beta`)
and the soft term's own `kd.temperature` and `kd.alpha` (a run whose T or alpha differs from the
first run's names it in its row's label), one of them with `--baseline` (its `baseline/`: the same student on next-token CE alone, from the
same initialisation, data and steps). For each KD student and the CE-only one:
  - held-out perplexity, next-token accuracy and top-1 agreement with the teacher, from the
    runs' report.json (distill measures all of them on the same packed test windows);
  - the mean forward KL, reverse KL and total variation between the teacher's next-token
    distribution and the student's over the predicting positions of those windows (T = 1;
    `distill_tools.lm_eval.mean_divergences`), the teacher's and each student's TorchScript on
    the CPU: which distance each soft term brought down;
  - greedy continuations of held-out prompts (`distill_tools.lm_eval.PROMPTS`).
No speed is measured: these runs share a loaded CPU.
"""
import argparse
import json
import os
import sys
import time
import tomllib

import torch
from tokenizers import Tokenizer

from distill_tools.benchmarks_md import write_section
from distill_tools.lm_eval import NEW_TOKENS, PROMPTS, greedy, mean_divergences, windows
from distill_tools.machine import summary as machine_summary

START, END = "<!-- lm-divergences:begin -->", "<!-- lm-divergences:end -->"
NAMES = {"forward_kl": "forward KL", "reverse_kl": "reverse KL", "jsd": "JSD", "tvd": "total variation"}


def fail(msg):
    print(f"bench-lm-divergences: {msg}", file=sys.stderr)
    sys.exit(2)


SOFT_KEYS = ("divergence", "beta", "temperature", "alpha")


def soft_term(cfg, reference=None):
    """The label of a cfg's divergence: `forward KL` (also when unset), `JSD (beta 0.5)`, ...;
    with the reference cfg `reference` (the first run's), also the temperature and alpha where
    they differ from its: `reverse KL (T = 2.0)`, `reverse KL (alpha 0.2)`."""
    kd = cfg.get("kd", {})
    d = kd.get("divergence", "forward_kl")
    own = [f"beta {kd.get('beta', 0.5)}"] if d == "jsd" else []
    ref = (reference or cfg).get("kd", {})
    if kd.get("temperature") != ref.get("temperature"):
        own.append(f"T = {kd.get('temperature')}")
    if kd.get("alpha") != ref.get("alpha"):
        own.append(f"alpha {kd.get('alpha')}")
    return f"{NAMES[d]} ({', '.join(own)})" if own else NAMES[d]


def without_divergence(cfg):
    """The cfg without the soft term's own settings (`kd.divergence`, `kd.beta`,
    `kd.temperature`, `kd.alpha`): what every run must share."""
    kd = {k: v for k, v in cfg.get("kd", {}).items() if k not in SOFT_KEYS}
    return {**cfg, "kd": kd}


def read_runs(runs):
    """[(key, label, report entry, folder)] of the KD students and the one CE-only baseline;
    exit 2 naming the run when one is unfinished, the cfgs differ beyond the soft term's own
    settings, or not exactly one run has a baseline. Also the first run's report (the teacher's
    and data's) and its cfg (the reference of the labels' T and alpha)."""
    students, baselines, shared, first, reference = [], [], None, None, None
    for run in runs:
        report_path = os.path.join(run, "report.json")
        if not os.path.isfile(report_path):
            fail(f"{report_path} is missing: give finished runs")
        report = json.load(open(report_path))
        cfg = tomllib.load(open(os.path.join(run, "config.toml"), "rb"))
        if shared is None:
            shared, first, reference = without_divergence(cfg), report, cfg
        elif without_divergence(cfg) != shared:
            fail(f"{run}/config.toml differs from {runs[0]}/config.toml beyond kd.divergence, kd.beta, kd.temperature and "
                 "kd.alpha: not a like-for-like comparison")
        label = soft_term(cfg, reference)
        students.append((os.path.basename(os.path.normpath(run)), f"KD, {label}", report["student"], run))
        if report.get("baseline"):
            baselines.append(("ce", "CE-only (no teacher)", report["baseline"], os.path.join(run, "baseline")))
    if len(baselines) != 1:
        fail(f"{len(baselines)} of the runs have a CE-only baseline: give exactly one run made with --baseline")
    return students, baselines[0], first, reference


def conclusion(students, ce, teacher_ppl):
    """The sentences the table supports: the best soft term by perplexity and by agreement, and
    each KD student against the CE-only one."""
    best = min(students, key=lambda s: s[2]["test_perplexity"])
    agree = max(students, key=lambda s: s[2]["agreement"])
    ce_ppl = ce[2]["test_perplexity"]
    out = [f"Lowest held-out perplexity: **{best[1]}** ({best[2]['test_perplexity']:.2f}; the teacher's "
           f"{teacher_ppl:.2f}, CE-only {ce_ppl:.2f}). Highest top-1 agreement with the teacher: "
           f"**{agree[1]}** ({agree[2]['agreement']:.1%}, CE-only {ce[2]['agreement']:.1%}).", ""]
    for _, label, r, _ in students:
        ppl = r["test_perplexity"]
        verdict = "beats" if ppl < ce_ppl else "does not beat"
        change = f"{abs(ce_ppl - ppl) / ce_ppl:.1%} {'lower' if ppl < ce_ppl else 'higher'}"
        out.append(f"- {label} {verdict} CE alone: perplexity {ppl:.2f} against {ce_ppl:.2f} ({change}), "
                   f"agreement {r['agreement']:.1%} against {ce[2]['agreement']:.1%}.")
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("runs", nargs="+", help="finished distill runs of one cfg, one per kd.divergence, one with --baseline")
    p.add_argument("--teacher", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--loads", help="a file of `/proc/loadavg` lines taken while the runs trained")
    p.add_argument("--command", required=True)
    p.add_argument("--note", default="", help="a sentence for the section (e.g. how the runs were made)")
    p.add_argument("--out", default="runs/bench-lm-divergences")
    p.add_argument("--benchmarks", default="BENCHMARKS.md")
    a = p.parse_args()
    students, ce, report, cfg = read_runs(a.runs)
    alpha, temperature = cfg["kd"].get("alpha"), cfg["kd"].get("temperature")
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(a.threads)
    tok = Tokenizer.from_file(a.tokenizer)
    teacher = torch.jit.load(a.teacher).eval()
    everyone = students + [ce]
    models = {key: torch.jit.load(os.path.join(folder, "student.pt")).eval() for key, _, _, folder in everyone}
    labels = {"teacher": "teacher", **{key: label for key, label, _, _ in everyone}}
    load = os.getloadavg()
    data = windows(tok, a.test, a.window)
    div = mean_divergences(teacher, models, data, a.batch)
    samples = {name: [greedy(m, tok, pr, NEW_TOKENS) for pr in PROMPTS] for name, m in {"teacher": teacher, **models}.items()}

    t, s = report["teacher"], report["student"]
    train = report["data"]["train_text"]
    train_loads = [float(l.split()[0]) for l in open(a.loads)] if a.loads and os.path.isfile(a.loads) else []
    load_s = (f"one-minute load average {min(train_loads):.1f}-{max(train_loads):.1f} at the runs' starts and ends"
              if train_loads else "load not recorded during training")
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    other = (", at the T and alpha a row names where it names one"
             if any("T = " in label or "alpha " in label for _, label, _, _ in students) else "")
    lines = [START, "## Causal LM under each divergence (`scripts/bench-lm-divergences`)", "",
             f"Measured {date} with `{a.command}` on {machine_summary()}, no GPU, torch {torch.__version__}; "
             f"{load_s}, {load[0]:.1f} at the measurement (a CPU shared with other jobs: quality at equal steps "
             "does not depend on it, so no speed is reported)." + (f" {a.note}" if a.note else ""), "",
             f"Every student is the demo's (examples/smollm2/student-fast.toml: 4 decoder layers from SmolLM2-135M-Instruct's "
             f"0, 9, 19, 29, the head factorised at rank 192 and fitted to the teacher's) from the same initialisation, data, "
             f"seed and steps: {train['packing']['tokens']:,} training tokens ({train['packing']['lines']:,} KJV passages) in "
             f"{train['lines']:,} windows of {a.window}, {s['steps']} steps of {s['batch_size']} windows, bf16 autocast, the teacher "
             f"run on every batch. A KD student's loss is {alpha} x D(teacher, student) (T = {temperature}) + {1 - alpha:g} x next-token CE, D the divergence "
             f"named (`kd.divergence`){other}; the CE-only student's is the CE alone. Evaluated on {data.shape[0]} held-out windows "
             f"({data.shape[0] * a.window:,} tokens of Genesis 1, Ruth, Jonah, Titus, Philemon and Jude). The last three columns: "
             f"the mean distance between the teacher's and the student's next-token distributions over those windows' "
             f"predicting positions (nats; total variation in [0, 1]).", "",
             "| student | test perplexity | next-token accuracy | top-1 agreement with the teacher | KL(teacher \\|\\| student) | KL(student \\|\\| teacher) | total variation |",
             "|---|---:|---:|---:|---:|---:|---:|",
             f"| teacher | {t['test_perplexity']:.2f} | {t['test_accuracy']:.1%} | - | - | - | - |"]
    for key, label, r, _ in everyone:
        d = div[key]
        lines.append(f"| {label} | **{r['test_perplexity']:.2f}** | {r['test_accuracy']:.1%} | {r['agreement']:.1%} | "
                     f"{d['forward_kl']:.3f} | {d['reverse_kl']:.3f} | {d['tvd']:.3f} |")
    lines += [""] + conclusion(students, ce, t["test_perplexity"])
    lines += ["", f"Greedy continuations ({NEW_TOKENS} tokens) of held-out prompts:", ""]
    for i, pr in enumerate(PROMPTS):
        lines.append(f"- *{pr}*")
        for name in samples:
            text = samples[name][i].replace("\n", " ").replace("|", "\\|")
            lines.append(f"  - {labels[name]}: {text}")
    lines.append(END)
    text = "\n".join(lines)
    write_section(a.benchmarks, text, START, END)
    json.dump({"divergences": div, "samples": samples, "reports": {k: r for k, _, r, _ in everyone}},
              open(os.path.join(a.out, "bench.json"), "w"), indent=1)
    print(text)


if __name__ == "__main__":
    main()
