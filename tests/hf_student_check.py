"""Checks a distill run's Hugging Face student folder with `transformers` (run by the e2e test
tests/e2e/hf_student.rs; by hand: `.venv/bin/python tests/hf_student_check.py RUN_DIR`).

Loads RUN_DIR/hf with `AutoModelForCausalLM.from_pretrained` (fp32, eager attention) and
RUN_DIR/student.pt with `torch.jit.load`, runs both on a right-padded batch of token ids (3 rows
of 12, 9 and 5 tokens, ids from seed 0), and prints one line:

  diff D tokens N generated G

D: the largest |logit difference| over the N real tokens (padded positions are not compared:
distill's causal student does not read the mask, transformers' does, and what a padded position
computes is never used); G: the tokens `generate` (greedy, the folder's generation_config.json)
added to the first row, which equal the argmax of student.pt's logits, step by step (the script
fails otherwise). It also fails when `AutoTokenizer` does not load the folder's tokenizer or
encodes a sentence otherwise than its tokenizer.json.

Without `transformers` it prints `skipped: <reason>` and exits 0.
"""
import os
import sys

try:
    import transformers
except ImportError:
    print("skipped: transformers is not installed (scripts/setup installs transformers==5.25.0)")
    sys.exit(0)

import torch
from tokenizers import Tokenizer

LENGTHS = [12, 9, 5]
NEW_TOKENS = 4


def main(run):
    folder = os.path.join(run, "hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    student = torch.jit.load(os.path.join(run, "student.pt"))
    vocab = model.config.vocab_size
    ids = torch.randint(vocab, (len(LENGTHS), max(LENGTHS)), generator=torch.Generator().manual_seed(0))
    mask = torch.zeros_like(ids)
    for row, n in enumerate(LENGTHS):
        mask[row, :n] = 1
    ids = ids * mask
    with torch.no_grad():
        hf = model(input_ids=ids, attention_mask=mask).logits
        ours = student(ids, mask)
    real = mask.bool()
    diff = float((hf - ours)[real].abs().max())

    prompt = ids[:1, :5]
    with torch.no_grad():
        generated = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS, do_sample=False)
        greedy = prompt
        for _ in range(NEW_TOKENS):
            step = student(greedy, torch.ones_like(greedy))[:, -1].argmax(-1, keepdim=True)
            greedy = torch.cat([greedy, step], 1)
    if not torch.equal(generated, greedy):
        sys.exit(f"generate gave {generated.tolist()}, student.pt's greedy tokens {greedy.tolist()}")

    sentence = "In the beginning God created the heaven and the earth."
    auto = transformers.AutoTokenizer.from_pretrained(folder)
    want = Tokenizer.from_file(os.path.join(folder, "tokenizer.json")).encode(sentence, add_special_tokens=False).ids
    got = auto(sentence, add_special_tokens=False)["input_ids"]
    if got != want:
        sys.exit(f"AutoTokenizer encodes {got}, tokenizer.json {want}")
    print(f"diff {diff} tokens {int(real.sum())} generated {generated.shape[1] - prompt.shape[1]}")


if __name__ == "__main__":
    main(sys.argv[1])
