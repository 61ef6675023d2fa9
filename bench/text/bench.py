"""The sentence-encoder benchmark of the text demo: each distilled student against the
teacher (all-MiniLM-L6-v2) in the same run, on the CPU, written into BENCHMARKS.md between the
`text-encoder` markers and into OUT/bench.json. Called by `scripts/bench-text` (which trains the
students); runs alone on any run folders:

    .venv/bin/python bench/text/bench.py --data data/minilm \\
        --student main=runs/bench-text/main --student narrow=runs/bench-text/narrow

A student run folder holds `student.pt` (TorchScript: `forward(input_ids, attention_mask)`, int64
[B, S] -> [B, 384]), and where distill wrote them `student.safetensors` and `report.json`;
`DIR.log` beside it (distill's stderr) gives the time spent caching the teacher's embeddings.

Measured, for the teacher and every student (sentences tokenised once with `tokenizers` on
tokenizer.json, padding off, truncation at 128, each batch right-padded to its longest sentence):
- Spearman's rho between the student's and the teacher's cosine similarities over --pairs seeded
  random pairs of held-out sentences (test.txt), and the mean cosine of the two embeddings;
- retrieval (retrieval.tsv): each example sentence ranks all the distinct held-out definitions
  by cosine; recall@1 and MRR of its own synset's definition;
- CPU throughput: sentences/s over test.txt in file order at --batch per call, the same batches
  for every model, on --threads torch threads, after warm-up calls; --reps passes, the models
  interleaved batch by batch (a load change on a shared machine hits all alike), median and
  min-max; the rate the process's CPU time implies (with the cores to itself) beside it;
- parameters (embedding tables and the rest, from student.safetensors, else the TorchScript
  module) and file sizes; the run's own figures from report.json.
Bad input: one line naming the file and the fix, exit 2.
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

import numpy as np

from distill_tools.machine import cpu_model, gpu_name
from distill_tools.text_bench import metrics
from distill_tools.benchmarks_md import write_section
from distill_tools.text_bench.report import TITLE, markers, section

MAX_TOKENS = 128
CACHE_LINE = re.compile(r"outputs of (\d+) train samples cached in ([0-9.]+) s")
CACHE_READ_LINE = re.compile(r"outputs of (\d+) train samples read from")


def fail(msg: str):
    print(f"bench-text: {msg}", file=sys.stderr)
    sys.exit(2)


def read_lines(path: str) -> list:
    """Non-empty lines of a UTF-8 text file."""
    if not os.path.isfile(path):
        fail(f"{path} is missing: run scripts/prepare-text")
    with open(path, encoding="utf-8") as f:
        return [line for line in f.read().splitlines() if line.strip()]


def read_retrieval(path: str) -> tuple:
    """(examples [q], distinct definitions [c], gold int64 [q]: each example's definition)."""
    examples, definitions, gold, index = [], [], [], {}
    for n, line in enumerate(read_lines(path), 1):
        parts = line.split("\t")
        if len(parts) != 2:
            fail(f"{path} line {n}: want `example<TAB>definition`, got {len(parts)} fields: rebuild it with scripts/prepare-text")
        examples.append(parts[0])
        gold.append(index.setdefault(parts[1], len(index)))
        if gold[-1] == len(definitions):
            definitions.append(parts[1])
    return examples, definitions, np.array(gold, dtype=np.int64)


def batches_of(tok, sentences: list, batch: int) -> list:
    """[(input_ids, attention_mask)], int64 [b, longest of the batch], in the sentences' order."""
    import torch

    out = []
    for start in range(0, len(sentences), batch):
        encodings = tok.encode_batch(sentences[start : start + batch])
        longest = max(len(e.ids) for e in encodings)
        ids = torch.zeros(len(encodings), longest, dtype=torch.int64)
        mask = torch.zeros(len(encodings), longest, dtype=torch.int64)
        for i, e in enumerate(encodings):
            ids[i, : len(e.ids)] = torch.tensor(e.ids, dtype=torch.int64)
            mask[i, : len(e.ids)] = 1
        out.append((ids, mask))
    return out


def embed(module, batches: list):
    """Embeddings float32 [n, d] of the batches' sentences, in order."""
    import torch

    with torch.inference_mode():
        return torch.cat([module(ids, mask) for ids, mask in batches]).float().numpy()


def interleaved_passes(modules: list, batches: list, reps: int, names: list) -> tuple:
    """`reps` timed passes of every module over `batches`, interleaved batch by batch (each batch
    runs through every module, starting with the next module at each batch), so a change in the
    machine's load hits all of them alike. Returns (embeddings [n, d] of each module's first
    pass, wall seconds [module][rep], process CPU seconds [module][rep])."""
    import torch

    m = len(modules)
    walls, cpus = [[0.0] * reps for _ in modules], [[0.0] * reps for _ in modules]
    outputs = [[] for _ in modules]
    with torch.inference_mode():
        for rep in range(reps):
            for b, (ids, mask) in enumerate(batches):
                for k in [(rep + b + i) % m for i in range(m)]:
                    wall, cpu = time.perf_counter(), time.process_time()
                    out = modules[k](ids, mask)
                    walls[k][rep] += time.perf_counter() - wall
                    cpus[k][rep] += time.process_time() - cpu
                    if rep == 0:
                        outputs[k].append(out)
            n = sum(len(ids) for ids, _ in batches)
            rates = ", ".join(f"{name} {n / walls[k][rep]:.0f}" for k, name in enumerate(names))
            print(f"  pass {rep + 1}/{reps}, sentences/s: {rates}", file=sys.stderr, flush=True)
    return [torch.cat(o).float().numpy() for o in outputs], walls, cpus


def parameter_shapes(pt_path: str, module) -> tuple:
    """({name: shape}, source): student.safetensors beside `pt_path` when present (the names of
    the student contract), else the TorchScript module's parameters."""
    st = os.path.join(os.path.dirname(pt_path), "student.safetensors")
    if os.path.basename(pt_path) == "student.pt" and os.path.isfile(st):
        from safetensors import safe_open

        with safe_open(st, framework="numpy") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}, "safetensors"
    return {k: tuple(p.shape) for k, p in module.named_parameters()}, "torchscript"


def architecture(shapes: dict) -> str:
    """`layers x width (FFN f)` from parameter names: blocks `blk{i}_attn.` (student contract)
    or `layer.{j}.` (BERT), width = the token embedding's columns, f = the first feed-forward's
    neurons (`fc1` / `intermediate.dense` rows)."""
    names = [k.replace("|", ".") for k in shapes]
    blocks = {m.group(1) or m.group(2) for k in names for m in [re.search(r"blk(\d+)_attn\.|layer\.(\d+)\.", k)] if m}
    def first(pattern: str, dim: int):
        return next((s[dim] for k, s in zip(names, shapes.values()) if re.search(pattern, k) and len(s) == 2), None)
    width = first(r"(tokens|word_embeddings)\.weight$", 1)
    ffn = first(r"(_mlp\.fc1|intermediate\.dense)\.weight$", 0)
    shape = f"{len(blocks)} x {width}" if width else f"{len(blocks)} layers"
    return f"{shape} (FFN {ffn})" if ffn else shape


def run_figures(run_dir: str) -> dict:
    """The run's own figures: report.json's (absent keys: None) and, from DIR.log, how many
    train sentences the teacher embedded and in how many seconds (or that it read them from
    another run's cache: `teacher_cache_read`)."""
    out = {}
    path = os.path.join(run_dir, "report.json")
    if os.path.isfile(path):
        with open(path) as f:
            r = json.load(f)
        s = r.get("student", {})
        out = {
            "config": r.get("config"),
            "train_samples": r.get("data", {}).get("train_samples"),
            "wall_seconds": r.get("wall_seconds"),
            "train_seconds": s.get("train_seconds"),
            "samples_per_s": s.get("samples_per_s"),
            "steps": s.get("steps"),
            "agreement": s.get("agreement"),
            "spearman": s.get("spearman"),
            "device": r.get("device"),
        }
    log = run_dir.rstrip("/") + ".log"
    if os.path.isfile(log):
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        found = CACHE_LINE.findall(text)
        if found:
            out["teacher_cache_sentences"], out["teacher_cache_seconds"] = int(found[-1][0]), float(found[-1][1])
        elif CACHE_READ_LINE.search(text):
            out["teacher_cache_read"] = True
    return out


def load(name: str, pt_path: str, run_dir):
    """A model entry: its TorchScript module, parameters, file sizes and run figures."""
    import torch

    if not os.path.isfile(pt_path):
        fail(f"{name}: {pt_path} is missing (a finished distill run folder holds student.pt)")
    try:
        module = torch.jit.load(pt_path, map_location="cpu").eval()
    except Exception as e:  # noqa: BLE001 (any load error is the user's file)
        fail(f"{name}: {pt_path} does not load as TorchScript ({str(e).splitlines()[0]})")
    shapes, source = parameter_shapes(pt_path, module)
    embedding, other = metrics.split_parameters(shapes)
    files = {os.path.basename(pt_path): os.path.getsize(pt_path)}
    st = os.path.join(os.path.dirname(pt_path), "student.safetensors")
    if source == "safetensors":
        files["student.safetensors"] = os.path.getsize(st)
    entry = {
        "name": name,
        "path": pt_path,
        "architecture": architecture(shapes),
        "params": {"embedding": embedding, "non_embedding": other, "total": embedding + other, "source": source},
        "files": files,
        "run": run_figures(run_dir) if run_dir else {},
    }
    return entry, module


def measure(a) -> dict:
    """Everything the section shows, as a JSON-able dict (see the module docstring)."""
    import torch
    from tokenizers import Tokenizer

    torch.set_num_threads(a.threads)
    tok_path = os.path.join(a.data, "tokenizer.json")
    if not os.path.isfile(tok_path):
        fail(f"{tok_path} is missing: run scripts/prepare-text")
    tok = Tokenizer.from_file(tok_path)
    tok.no_padding()
    tok.enable_truncation(MAX_TOKENS)
    test = read_lines(os.path.join(a.data, "test.txt"))
    examples, definitions, gold = read_retrieval(os.path.join(a.data, "retrieval.tsv"))
    try:
        pairs = metrics.random_pairs(len(test), a.pairs, a.seed)
    except ValueError as e:
        fail(f"--pairs {a.pairs}: {e}")

    entries, modules = [], []
    for name, pt, run in [("teacher", a.teacher, None)] + [(n, os.path.join(d, "student.pt"), d) for n, d in a.students]:
        entry, module = load(name, pt, run)
        entries.append(entry)
        modules.append(module)
    test_batches = batches_of(tok, test, a.batch)
    tokens = sum(int(m.sum()) for _, m in test_batches)
    padded = sum(m.numel() for _, m in test_batches)

    load_before = os.getloadavg()[0]
    width = None
    for entry, module in zip(entries, modules):
        for ids, mask in test_batches[: a.warmup]:  # TorchScript profiles and optimises its first calls
            with torch.inference_mode():
                out = module(ids, mask)
        if out.dim() != 2 or (width is not None and out.shape[1] != width):
            fail(f"{entry['name']}: {entry['path']} returns shape {list(out.shape)}, want [batch, {width or 'width'}] like the teacher")
        width = out.shape[1]
    test_embeddings, walls, cpus = interleaved_passes(modules, test_batches, a.reps, [e["name"] for e in entries])
    load_after = os.getloadavg()[0]

    teacher_cos = metrics.pair_cosines(test_embeddings[0], pairs)
    for k, entry in enumerate(entries):
        ex = embed(modules[k], batches_of(tok, examples, a.batch))
        de = embed(modules[k], batches_of(tok, definitions, a.batch))
        ranks = metrics.retrieval_ranks(ex, de, gold)
        s, t = test_embeddings[k].astype(np.float64), test_embeddings[0].astype(np.float64)
        cos_with_teacher = (s * t).sum(1) / np.maximum(np.linalg.norm(s, axis=1) * np.linalg.norm(t, axis=1), 1e-12)
        entry["quality"] = {
            "spearman": metrics.spearman(metrics.pair_cosines(test_embeddings[k], pairs), teacher_cos),
            "mean_cosine_with_teacher": float(cos_with_teacher.mean()),
            "recall_at_1": metrics.recall_at_1(ranks),
            "mrr": metrics.mean_reciprocal_rank(ranks),
        }
        entry["throughput"] = {
            "wall_seconds": walls[k],
            "cpu_seconds": cpus[k],
            "sentences_per_s": len(test) / statistics.median(walls[k]),
            "sentences_per_s_min": len(test) / max(walls[k]),
            "sentences_per_s_max": len(test) / min(walls[k]),
            "sentences_per_s_cpu_time": len(test) / statistics.median(cpus[k]) * a.threads,
            # per pass (the passes are interleaved, so each ratio compares like with like)
            "speedup_vs_teacher": statistics.median(tw / mw for tw, mw in zip(walls[0], walls[k])),
        }
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": a.command,
        "note": a.note,
        "machine": {"cores": os.cpu_count(), "cpu": cpu_model(), "gpu": gpu_name(torch), "torch": torch.__version__, "load_average": [load_before, load_after]},
        "settings": {"threads": a.threads, "batch": a.batch, "reps": a.reps, "warmup_calls": a.warmup, "pairs": a.pairs, "seed": a.seed, "max_tokens": MAX_TOKENS},
        "data": {
            "test_sentences": len(test),
            "tokens_per_sentence": tokens / len(test),
            "tokens_per_sentence_padded": padded / len(test),
            "retrieval_queries": len(examples),
            "retrieval_candidates": len(definitions),
        },
        "teacher_file": a.teacher,
        "models": entries,
    }


def student_arg(text: str) -> tuple:
    name, sep, folder = text.partition("=")
    if not sep or not name or not folder:
        raise argparse.ArgumentTypeError(f"--student {text}: want NAME=RUN_DIR, e.g. main=runs/bench-text/main")
    return name, os.path.expanduser(folder)


def parse_args(argv=None) -> argparse.Namespace:
    """The command line; a leading `~` in a path is the home folder (the shell expands it only
    where a word starts with it, not in `--data=~/d` or `--student main=~/run`)."""
    path = os.path.expanduser
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=path, default="data/minilm", help="teacher.pt, tokenizer.json, test.txt, retrieval.tsv")
    p.add_argument("--teacher", type=path, help="default DATA/teacher.pt")
    p.add_argument("--student", dest="students", type=student_arg, action="append", default=[], metavar="NAME=RUN_DIR")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--reps", type=int, default=5, help="timed passes over test.txt per model")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls per model before timing")
    p.add_argument("--pairs", type=int, default=10000, help="random held-out sentence pairs for Spearman")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=path, default="runs/bench-text", help="folder of bench.json")
    p.add_argument("--benchmarks", type=path, default="BENCHMARKS.md")
    p.add_argument("--command", default="bench/text/bench.py")
    p.add_argument("--note", default="", help="a sentence for the section (e.g. a training subset)")
    p.add_argument("--section", default="", help="write a separate section, <!-- text-encoder-SECTION:begin --> ...")
    p.add_argument("--title", default=TITLE, help="the section's heading")
    p.add_argument("--report-only", action="store_true", help="rewrite the section from OUT/bench.json")
    return p.parse_args(argv)


def main():
    a = parse_args()
    result_path = os.path.join(a.out, "bench.json")
    if a.report_only:
        if not os.path.isfile(result_path):
            fail(f"{result_path} is missing: run without --report-only first")
        with open(result_path) as f:
            result = json.load(f)
    else:
        if not a.students:
            fail("no --student NAME=RUN_DIR given")
        if a.reps < 1 or a.threads < 1 or a.batch < 1 or a.warmup < 1:
            fail("--reps, --threads, --batch and --warmup must be at least 1")
        a.teacher = a.teacher or os.path.join(a.data, "teacher.pt")
        result = measure(a)
        os.makedirs(a.out, exist_ok=True)
        with open(result_path, "w") as f:
            json.dump(result, f, indent=1)
    text = section(result, a.section, a.title)
    write_section(a.benchmarks, text, *markers(a.section))
    print(text)


if __name__ == "__main__":
    main()
