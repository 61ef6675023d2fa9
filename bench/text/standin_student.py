"""A stand-in student run folder cut from the teacher, without training: the teacher's embeddings
and a subset of its layers, exactly the starting point `[student] init_from_teacher` gives
distill's student. For trying `bench.py` without a trained run, and as the figure a student
reaches before any distillation.

    .venv/bin/python bench/text/standin_student.py data/minilm runs/standin --layers 0,2,4

Reads DATA_DIR/teacher.pt (parameters named as Hugging Face's BertModel, see
examples/minilm/bert.py) and writes OUT_DIR/student.pt (TorchScript, `forward(input_ids,
attention_mask) -> [B, 384]`, as distill exports) and OUT_DIR/student.safetensors (the student
contract's names: `embed.tokens.weight`, `blk{i}_attn.qkv.weight` with rows q|k|v, ...). No
report.json: bench.py shows the run's own figures as absent.
"""
import argparse
import os
import sys

import torch

from distill_tools.minilm.bert import BertConfig, BertSentenceEncoder, scripted


def contract_names(state: dict, layers: int) -> dict:
    """The student contract's tensors from a BertSentenceEncoder state_dict of `layers` layers
    (student block i, 1-based, is encoder layer i - 1)."""
    out = {
        "embed.tokens.weight": state["embeddings.word_embeddings.weight"],
        "embed.positions.weight": state["embeddings.position_embeddings.weight"],
        "embed.token_types.weight": state["embeddings.token_type_embeddings.weight"],
        "embed_norm.weight": state["embeddings.LayerNorm.weight"],
        "embed_norm.bias": state["embeddings.LayerNorm.bias"],
    }
    for i in range(1, layers + 1):
        p = f"encoder.layer.{i - 1}."
        for kind in ("weight", "bias"):
            qkv = [state[f"{p}attention.self.{x}.{kind}"] for x in ("query", "key", "value")]
            out[f"blk{i}_attn.qkv.{kind}"] = torch.cat(qkv)
            out[f"blk{i}_attn.proj.{kind}"] = state[f"{p}attention.output.dense.{kind}"]
            out[f"blk{i}_attn.norm.{kind}"] = state[f"{p}attention.output.LayerNorm.{kind}"]
            out[f"blk{i}_mlp.fc1.{kind}"] = state[f"{p}intermediate.dense.{kind}"]
            out[f"blk{i}_mlp.fc2.{kind}"] = state[f"{p}output.dense.{kind}"]
            out[f"blk{i}_mlp.norm.{kind}"] = state[f"{p}output.LayerNorm.{kind}"]
    return {k: v.detach().contiguous() for k, v in out.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data", help="folder with teacher.pt")
    p.add_argument("out", help="run folder to write (student.pt, student.safetensors)")
    p.add_argument("--layers", default="0,2,4", help="teacher layers to keep, in order")
    p.add_argument("--heads", type=int, default=12, help="the teacher's attention heads (all-MiniLM-L6-v2: 12)")
    a = p.parse_args()
    from safetensors.torch import save_file

    keep = [int(x) for x in a.layers.split(",")]
    teacher = torch.jit.load(os.path.join(a.data, "teacher.pt"), map_location="cpu").state_dict()
    prefix = next(k for k in teacher if k.endswith("embeddings.word_embeddings.weight"))[: -len("embeddings.word_embeddings.weight")]
    teacher = {k[len(prefix) :]: v for k, v in teacher.items() if k.startswith(prefix)}
    depth = 1 + max(int(k.split(".")[2]) for k in teacher if k.startswith("encoder.layer."))
    if any(j < 0 or j >= depth for j in keep):
        sys.exit(f"standin_student: --layers {a.layers}: the teacher has layers 0..{depth - 1}")
    vocab, hidden = teacher["embeddings.word_embeddings.weight"].shape
    config = BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=len(keep),
        num_attention_heads=a.heads,
        intermediate_size=teacher["encoder.layer.0.intermediate.dense.weight"].shape[0],
        max_position_embeddings=teacher["embeddings.position_embeddings.weight"].shape[0],
        type_vocab_size=teacher["embeddings.token_type_embeddings.weight"].shape[0],
    )
    state = {}
    for k, v in teacher.items():
        if k.startswith("encoder.layer."):
            j = int(k.split(".")[2])
            if j in keep:
                rest = k.split(".", 3)[3]
                state[f"encoder.layer.{keep.index(j)}.{rest}"] = v
        else:
            state[k] = v
    model = BertSentenceEncoder(config)
    model.load_state_dict(state)
    os.makedirs(a.out, exist_ok=True)
    scripted(model).save(os.path.join(a.out, "student.pt"))
    save_file(contract_names(model.state_dict(), len(keep)), os.path.join(a.out, "student.safetensors"))
    print(f"wrote {a.out}/student.pt and student.safetensors: teacher layers {keep}, {sum(v.numel() for v in state.values()):,} parameters")


if __name__ == "__main__":
    main()
