"""Peak resident memory of a `distill` run that loads a 16-bit Hugging Face teacher folder,
written into BENCHMARKS.md between the `hf-load` markers.

A random Llama (transformers' LlamaForCausalLM, --layers x --hidden, SwiGLU --intermediate, vocab
512, untied head: about 206 M parameters at the defaults) is saved in bf16 to a temporary folder
with the llama fixture's tokenizer. Three `distill` runs of a 1-layer student (d 32) on 40 lines of
the language-model fixture's text, each stopped after one step (`--stop-after-steps 1`: the teacher
loaded whole, its test pass, a step, a checkpoint) under `/usr/bin/time -f %M` (peak resident set,
KiB):

  - base: the tiny llama fixture (34,976 parameters) as the teacher: what the process holds
    without a large teacher (libtorch, the tokenizer, the student, the data);
  - bf16: the random folder with `teacher.precision = "bf16"`: its weights held as the file holds
    them; the run's peak less the base should be near the file's size, not the fp32 size;
  - fp32: the same folder with `teacher.precision = "fp32"`: the device needs the fp32 weights,
    about twice the file;
  - init: the bf16 folder again, the student a 1-layer one of the teacher's width started from
    its layer 0 (`student.init_from_teacher = [0]`).

Usage: .venv/bin/python bench/hf_load/bench.py --distill PATH/TO/distill [--benchmarks BENCHMARKS.md]
"""
import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import transformers

from distill_tools.benchmarks_md import write_section
from distill_tools.machine import summary as machine_summary

START, END = "<!-- hf-load:begin -->", "<!-- hf-load:end -->"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")

STUDENT = """[data]
train = "train.txt"
test = "test.txt"
tokenizer = "{tokenizer}"
input_shape = [64]
classes = 512

[student]
family = "transformer"
activation = "silu"
{student}

[teacher]
hf = "{teacher}"
precision = "{precision}"
cache_logits = false

[train]
epochs = 1
batch_size = 4
eval_batch_size = 4
seed = 0
"""


def random_llama(folder, layers, hidden, intermediate):
    """Saves a random bf16 LlamaForCausalLM to `folder` with the llama fixture's tokenizer;
    returns its parameter count."""
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=hidden, intermediate_size=intermediate,
                                      num_hidden_layers=layers, num_attention_heads=hidden // 64,
                                      num_key_value_heads=hidden // 64, max_position_embeddings=128,
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    shutil.copy(os.path.join(FIXTURES, "hf", "llama", "tokenizer.json"), folder)
    return sum(p.numel() for p in model.parameters())


SMALL = """
[student.transformer]
vocab = 512
layers = 1
d_model = 32
heads = 4
kv_heads = 2
mlp_width = 64
mlp = "swiglu"
norm = "rms"
rope_theta = 10000.0
bias = false
tie_embeddings = true
head = "lm"
"""


def wide(hidden, intermediate):
    """A 1-layer student of the teacher's width that starts from its first layer (and its
    embedding, final norm and head): `student.init_from_teacher = [0]`."""
    return f"""init_from_teacher = [0]

[student.transformer]
vocab = 512
layers = 1
d_model = {hidden}
heads = {hidden // 64}
mlp_width = {intermediate}
mlp = "swiglu"
norm = "rms"
rope_theta = 10000.0
bias = false
head = "lm"
"""


def peak_kib(distill, work, teacher, precision, student=SMALL, name="small"):
    """Peak resident set (KiB) of a one-step run of `student` on `teacher` in `precision`."""
    run = os.path.join(work, f"run-{precision}-{name}-{os.path.basename(teacher)}")
    cfg = os.path.join(work, f"{os.path.basename(run)}.toml")
    tokenizer = os.path.join(teacher, "tokenizer.json")
    with open(cfg, "w") as f:
        f.write(STUDENT.format(tokenizer=tokenizer, teacher=teacher, precision=precision, student=student))
    cmd = ["/usr/bin/time", "-f", "%M", distill, "--student", cfg, "--out", run, "--stop-after-steps", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    return int(r.stderr.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--distill", required=True, help="the distill binary")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--benchmarks", default=os.path.join(ROOT, "BENCHMARKS.md"))
    a = p.parse_args()
    distill = os.path.abspath(a.distill)
    with tempfile.TemporaryDirectory() as work:
        lines = open(os.path.join(FIXTURES, "lm", "lm-train.txt"), encoding="utf-8").read().splitlines()
        for name, part in [("train.txt", lines[:32]), ("test.txt", lines[32:40])]:
            with open(os.path.join(work, name), "w", encoding="utf-8") as f:
                f.write("\n".join(part) + "\n")
        folder = os.path.join(work, "llama-bf16")
        params = random_llama(folder, a.layers, a.hidden, a.intermediate)
        file_bytes = os.path.getsize(os.path.join(folder, "model.safetensors"))
        load = os.getloadavg()[0]
        base = peak_kib(distill, work, os.path.join(FIXTURES, "hf", "llama"), "bf16")
        bf16 = peak_kib(distill, work, folder, "bf16")
        fp32 = peak_kib(distill, work, folder, "fp32")
        init = peak_kib(distill, work, folder, "bf16", wide(a.hidden, a.intermediate), "init")
        load_after = os.getloadavg()[0]
    mib = lambda b: b / 2**20
    kib_mib = lambda k: k / 1024
    rows = [
        ("tiny llama fixture, bf16 (base)", base, "", ""),
        ("random folder, teacher.precision = \"bf16\"", bf16, kib_mib(bf16 - base), mib(file_bytes)),
        ("random folder, teacher.precision = \"fp32\"", fp32, kib_mib(fp32 - base), mib(4 * params)),
    ]
    layer = 4 * a.hidden * a.hidden + 3 * a.hidden * a.intermediate + 2 * a.hidden
    student_mib = mib(4 * (2 * 512 * a.hidden + layer + a.hidden))
    date = datetime.date.today().isoformat()
    command = f"python bench/hf_load/bench.py --distill {a.distill}"
    text = "\n".join([
        START,
        f"## Peak resident memory loading a 16-bit Hugging Face teacher folder (`bench/hf_load/bench.py`)",
        "",
        f"Measured {date} with `{command}` on {machine_summary()}, no GPU (the teacher on the CPU); "
        f"one-minute load average {load:.1f} before the runs and {load_after:.1f} after them.",
        "",
        f"A random Llama ({a.layers} layers, d {a.hidden}, SwiGLU {a.intermediate}, vocab 512, untied head: "
        f"{params:,} parameters) saved by transformers {transformers.__version__} in bf16: model.safetensors "
        f"{mib(file_bytes):.0f} MiB, {mib(4 * params):.0f} MiB in fp32. Each run trains a 1-layer student "
        "(d 32) for one step (`--stop-after-steps 1`: the teacher loaded, its test pass, the step, a checkpoint) "
        "under `/usr/bin/time -f %M`.",
        "",
        "| teacher | peak resident set (MiB) | above the base (MiB) | the weights as the device holds them (MiB) |",
        "| --- | ---: | ---: | ---: |",
    ] + [f"| {name} | {kib_mib(k):.0f} | {above if above == '' else f'{above:.0f}'} | "
         f"{held if held == '' else f'{held:.0f}'} |" for name, k, above, held in rows] + [
        "",
        f"The bf16 teacher adds {kib_mib(bf16 - base) / mib(file_bytes):.2f} x its file's size, the fp32 one "
        f"{kib_mib(fp32 - base) / mib(4 * params):.2f} x its fp32 weights: `distill` reads the safetensors one tensor "
        "at a time into a tensor of the file's dtype and casts it to the teacher's precision, so only a teacher run "
        "in fp32 holds fp32 weights.",
        "",
        f"A 1-layer student of the teacher's width started from its layer 0 (`student.init_from_teacher = [0]`, "
        f"bf16 teacher; the student {student_mib:.0f} MiB in fp32, with its gradients and AdamW moments on top) "
        f"peaked at {kib_mib(init):.0f} MiB, {kib_mib(init - bf16):.0f} MiB above the small student's run: the "
        "teacher's own bf16 tensors are copied into the student, with no second load of the folder in fp32 "
        f"({mib(4 * params):.0f} MiB).",
        END,
    ])
    write_section(a.benchmarks, text, START, END)
    print(text)


if __name__ == "__main__":
    main()
