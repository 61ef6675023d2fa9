"""The markdown section of BENCHMARKS.md for the sentence-encoder benchmark (between the
`text-encoder` markers), from the result dict `bench.py` measures (OUT/bench.json)."""

START, END = "<!-- text-encoder:begin -->", "<!-- text-encoder:end -->"
TITLE = "Sentence encoder distilled from all-MiniLM-L6-v2"
# The bar a student must pass against the teacher.
MIN_SPEARMAN, MIN_RECALL_SHARE, MIN_SPEEDUP = 0.95, 0.95, 2.5


def markers(section_id: str = "") -> tuple:
    """The (start, end) marker lines of the section: the benchmark's own, or with `section_id`
    those of a separate section (`<!-- text-encoder-ID:begin -->`), so a shortened comparison
    never replaces the full one."""
    if not section_id:
        return START, END
    return f"<!-- text-encoder-{section_id}:begin -->", f"<!-- text-encoder-{section_id}:end -->"


def _num(x, fmt: str, none: str = "-") -> str:
    return none if x is None else format(x, fmt)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _files(entry: dict) -> str:
    return ", ".join(f"`{name}` {_mb(size)}" for name, size in entry["files"].items())


def _params(p: dict) -> str:
    return f"{p['embedding'] / 1e6:.2f} M + {p['non_embedding'] / 1e6:.2f} M = {p['total'] / 1e6:.2f} M"


def _verdict(ok: bool) -> str:
    return "yes" if ok else "**no**"


def model_rows(result: dict) -> str:
    teacher = result["models"][0]
    t_recall = teacher["quality"]["recall_at_1"]
    rows = []
    for m in result["models"]:
        q, t = m["quality"], m["throughput"]
        share = f" ({100 * q['recall_at_1'] / t_recall:.1f}%)" if t_recall else ""
        is_teacher = m is teacher
        rows.append(
            f"| {m['name']} | {m['architecture']} | {_params(m['params'])} | {_files(m)} "
            f"| {'-' if is_teacher else format(q['spearman'], '.4f')} "
            f"| {'-' if is_teacher else format(q['mean_cosine_with_teacher'], '.4f')} "
            f"| {100 * q['recall_at_1']:.1f}%{'' if is_teacher else share} | {q['mrr']:.4f} "
            f"| {t['sentences_per_s']:,.0f} ({t['sentences_per_s_min']:,.0f}-{t['sentences_per_s_max']:,.0f}) "
            f"| {t['speedup_vs_teacher']:.2f}x | {t['sentences_per_s_cpu_time']:,.0f} |"
        )
    return "\n".join(rows)


def run_rows(result: dict) -> str:
    rows = []
    for m in result["models"][1:]:
        r = m["run"]
        if not r:
            rows.append(f"| {m['name']} | no report.json (not a distill run) | | | | | | | |")
            continue
        cache = "read from another run's" if r.get("teacher_cache_read") else _num(r.get("teacher_cache_seconds"), ",.0f")
        rows.append(
            f"| {m['name']} | `{r.get('config') or '-'}` | {_num(r.get('train_samples'), ',')} | {cache} "
            f"| {_num(r.get('train_seconds'), ',.0f')} | {_num(r.get('samples_per_s'), ',.0f')} "
            f"| {_num(r.get('wall_seconds'), ',.0f')} | {_num(r.get('agreement'), '.4f')} | {_num(r.get('spearman'), '.4f')} |"
        )
    return "\n".join(rows)


def target_rows(result: dict) -> str:
    teacher = result["models"][0]
    rows = []
    for m in result["models"][1:]:
        q = m["quality"]
        share = q["recall_at_1"] / teacher["quality"]["recall_at_1"] if teacher["quality"]["recall_at_1"] else 0.0
        speed = m["throughput"]["speedup_vs_teacher"]
        rows.append(
            f"| {m['name']} | {_verdict(q['spearman'] >= MIN_SPEARMAN)} | {_verdict(share >= MIN_RECALL_SHARE)} "
            f"| {_verdict(speed >= MIN_SPEEDUP)} |"
        )
    return "\n".join(rows)


def gpu_words(machine: dict) -> str:
    """`no GPU`, or the GPU the machine had (results from before the key: none)."""
    gpu = machine.get("gpu")
    return f"a {gpu} present (not used: the timings are the CPU's)" if gpu else "no GPU"


def section(result: dict, section_id: str = "", title: str = TITLE) -> str:
    """The whole section, markers included (`markers(section_id)`), under the heading `title`."""
    start, end = markers(section_id)
    s, d, mc = result["settings"], result["data"], result["machine"]
    note = f" {result['note']}" if result.get("note") else ""
    if max(mc["load_average"]) > mc["cores"]:
        note += (
            f" **The load average exceeded the {mc['cores']} cores**: with {s['threads']} threads per operator the"
            " timings then follow the number of operators more than their size (on this machine under load 7,"
            " a 4 x 256 encoder measured as fast as a 3 x 384 one with 2 threads, 1.9x the teacher, but 2.9x"
            " against 1.9x with 1 thread); compare speeds from an idle machine or `--threads 1`."
        )
    return f"""{start}
## {title} (`scripts/bench-text`)

Measured {result['date']} with `{result['command']}` on {mc['cores']} cores ({mc['cpu']}), {gpu_words(mc)},
torch {mc['torch']}; one-minute load average {mc['load_average'][0]:.1f} before the timing and
{mc['load_average'][1]:.1f} after it (the machine may be shared; the last column is the rate the
process's CPU time implies, sentences / (CPU seconds / threads)).{note}

Every model is measured in this one run, on the CPU with {s['threads']} threads, on data no
student trained on: `test.txt` ({d['test_sentences']:,} sentences of held-out
WordNet synsets, {d['tokens_per_sentence']:.1f} tokens each, {d['tokens_per_sentence_padded']:.1f}
with batch padding) and `retrieval.tsv`. Sentences are tokenised once with the teacher's
WordPiece tokenizer (`tokenizers`, padding off, truncation at {s['max_tokens']}), each batch padded
to its longest sentence. **Spearman**: rank correlation between the student's and the teacher's
cosine similarities over {s['pairs']:,} random distinct test-sentence pairs (seed {s['seed']}).
**Mean cosine**: of the student's and the teacher's embedding of the same test sentence.
**Retrieval**: each of {d['retrieval_queries']} example sentences ranks all {d['retrieval_candidates']}
held-out definitions by cosine; recall@1 (share of the teacher's in brackets) and MRR of its own
synset's definition. **Throughput**: the test sentences in file order at batch {s['batch']}, the
same batches for every model, tokenisation excluded, {s['warmup_calls']} warm-up calls, then
{s['reps']} timed passes, interleaved batch by batch (each batch runs through every model in
turn, a different model first each time); sentences/s of the median pass (min-max), and the
median over the passes of the teacher's time / the model's.
**Parameters**: embedding tables (token, position, token type) + the rest, from
`student.safetensors` (the teacher: its TorchScript parameters).

| model | layers x width (feed-forward) | parameters (embedding + other) | files | Spearman vs teacher | mean cosine with teacher | retrieval recall@1 | MRR | CPU sentences/s | vs teacher | sentences/s from CPU time |
|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|
{model_rows(result)}

The students' training runs (from their `report.json`; the teacher-embedding cache time from
distill's log): train sentences, seconds to embed them with the teacher, training seconds and
samples/s (optimiser steps only), the whole run's wall seconds, and the run's own mean cosine
and Spearman on the test set.

| student | cfg | train sentences | teacher cache s | train s | train samples/s | run wall s | in-run mean cosine | in-run Spearman |
|---|---|---:|---:|---:|---:|---:|---:|---:|
{run_rows(result)}

The bar for a student: Spearman >= {MIN_SPEARMAN}, recall@1 >= {100 * MIN_RECALL_SHARE:.0f}% of the teacher's, CPU throughput >= {MIN_SPEEDUP}x the teacher's.

| student | Spearman | recall@1 | throughput |
|---|---|---|---|
{target_rows(result)}
{end}"""

