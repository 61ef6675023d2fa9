"""Checks a distill run's Hugging Face student folder with `transformers` (run by the e2e tests
tests/e2e/hf_student.rs and explorer_folder.rs, through hf_readback.rs; by hand:
`.venv/bin/python tests/hf_student_check.py RUN_DIR`).

A language model (config.json's model_type llama or gpt2): loads RUN_DIR/hf with
`AutoModelForCausalLM.from_pretrained` (fp32, eager attention) and
RUN_DIR/student.pt with `torch.jit.load`, runs both on a right-padded batch of token ids (3 rows
of 12, 9 and 5 tokens, ids from seed 0), and prints one line:

  diff D tokens N generated G

D: the largest |logit difference| over the N real tokens (padded positions are not compared:
distill's causal student does not read the mask, transformers' does, and what a padded position
computes is never used); G: the tokens `generate` (greedy, the folder's generation_config.json)
added to the first row, which equal the argmax of student.pt's logits, step by step (the script
fails otherwise). It also fails when `AutoTokenizer` does not load the folder's tokenizer or
encodes a sentence otherwise than its tokenizer.json.

A sentence encoder (model_type bert): loads it with `AutoModel.from_pretrained`, applies the
folder's sentence-transformers modules (`modules.json`: mean or first-token pooling as
`1_Pooling/config.json` says, the `2_Dense` projection, `Normalize`) to `last_hidden_state`, and
prints `diff D rows R` (D: the largest |difference| from student.pt's embeddings of the same
padded batch, R rows); the tokenizer as above.

Without `transformers` it prints `skipped: <reason>` and exits 0.
"""
import os
import sys

try:
    import transformers
except ImportError:
    print("skipped: transformers is not installed (scripts/setup installs transformers==5.25.0)")
    sys.exit(0)

import json

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

LENGTHS = [12, 9, 5]
NEW_TOKENS = 4


def padded_batch(vocab):
    """Ids [3, 12] from seed 0, right-padded with 0 to LENGTHS, and their mask."""
    ids = torch.randint(vocab, (len(LENGTHS), max(LENGTHS)), generator=torch.Generator().manual_seed(0))
    mask = torch.zeros_like(ids)
    for row, n in enumerate(LENGTHS):
        mask[row, :n] = 1
    return ids * mask, mask


def check_tokenizer(folder):
    sentence = "In the beginning God created the heaven and the earth."
    auto = transformers.AutoTokenizer.from_pretrained(folder)
    raw = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    # transformers pads and truncates as each call asks, not as the file's settings say
    raw.no_padding()
    raw.no_truncation()
    want = raw.encode(sentence, add_special_tokens=False).ids
    got = auto(sentence, add_special_tokens=False)["input_ids"]
    if got != want:
        sys.exit(f"AutoTokenizer encodes {got}, tokenizer.json {want}")


def sentence_encoder(run, folder):
    model = transformers.AutoModel.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    student = torch.jit.load(os.path.join(run, "student.pt"))
    ids, mask = padded_batch(model.config.vocab_size)
    with torch.no_grad():
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state
        ours = student(ids, mask)
        with open(os.path.join(folder, "modules.json")) as f:
            modules = json.load(f)
        for module in modules[1:]:
            kind = module["type"].rsplit(".", 1)[1]
            path = os.path.join(folder, module["path"])
            if kind == "Pooling":
                with open(os.path.join(path, "config.json")) as f:
                    pooling = json.load(f)
                if pooling["pooling_mode_mean_tokens"]:
                    m = mask.unsqueeze(-1).float()
                    h = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                else:
                    h = h[:, 0]
            elif kind == "Dense":
                dense = load_file(os.path.join(path, "model.safetensors"))
                h = torch.nn.functional.linear(h, dense["linear.weight"], dense["linear.bias"])
            elif kind == "Normalize":
                h = torch.nn.functional.normalize(h, dim=-1)
            else:
                sys.exit(f"unknown module {module['type']}")
    check_tokenizer(folder)
    print(f"diff {float((h - ours).abs().max())} rows {h.shape[0]}")


def main(run):
    folder = os.path.join(run, "hf")
    with open(os.path.join(folder, "config.json")) as f:
        if json.load(f)["model_type"] == "bert":
            return sentence_encoder(run, folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    student = torch.jit.load(os.path.join(run, "student.pt"))
    ids, mask = padded_batch(model.config.vocab_size)
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

    check_tokenizer(folder)
    print(f"diff {diff} tokens {int(real.sum())} generated {generated.shape[1] - prompt.shape[1]}")


if __name__ == "__main__":
    main(sys.argv[1])
