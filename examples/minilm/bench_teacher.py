"""Measure the teacher's CPU throughput on WordNet lines, the figure prepare_text.py's default
--max-train follows from.

    .venv/bin/python examples/minilm/bench_teacher.py DATA_DIR [--threads 2] [--batch 64] [--lines 1280]

Reads DATA_DIR/{teacher.pt,tokenizer.json,train.txt}, embeds the first --lines sentences in
batches of --batch (file order, each batch right-padded to its longest sentence, truncated at 128
tokens as the demo does) on --threads torch threads, and prints sentences/s, tokens/s and how
many training sentences ~6 minutes of it embeds. --by-length sorts the lines by token count first,
to show what batching by length would save. Prints the 1-minute load average before and
after (other processes on the machine lower the figure) and the rate the process's CPU time
implies had it had its cores to itself.
"""
import argparse
import os
import time

import torch

from distill_tools.minilm.make_teacher import encode


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lines", type=int, default=1280)
    p.add_argument("--by-length", action="store_true", help="batch the lines sorted by length (less padding)")
    a = p.parse_args()
    from tokenizers import Tokenizer

    torch.set_num_threads(a.threads)
    tok = Tokenizer.from_file(os.path.join(a.data, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(128)
    teacher = torch.jit.load(os.path.join(a.data, "teacher.pt"))
    with open(os.path.join(a.data, "train.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()[: a.lines]
    if a.by_length:
        lines.sort(key=lambda line: len(tok.encode(line).ids))
    batches = [encode(tok, lines[i : i + a.batch]) for i in range(0, len(lines), a.batch)]
    tokens = sum(int(mask.sum()) for _, mask in batches)
    padded = sum(ids.numel() for ids, _ in batches)
    load0 = os.getloadavg()[0]
    with torch.no_grad():
        teacher(*batches[0])  # warm-up (TorchScript profiles its first calls)
        start, cpu_start = time.perf_counter(), time.process_time()
        for ids, mask in batches:
            teacher(ids, mask)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    rate = len(lines) / seconds
    print(f"{len(lines)} sentences ({tokens / len(lines):.1f} tokens each, {padded / len(lines):.1f} with padding) "
          f"in {seconds:.1f} s on {a.threads} threads, batch {a.batch}: {rate:.0f} sentences/s, "
          f"{tokens / seconds:.0f} tokens/s; 6 minutes embed {int(rate * 360)} sentences "
          f"(load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after); it used {cpu:.1f} CPU s: "
          f"{len(lines) / cpu * a.threads:.0f} sentences/s if it had had its {a.threads} cores alone")


if __name__ == "__main__":
    main()
