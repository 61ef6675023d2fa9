"""TorchScript teachers with random weights of the real shapes, for memory and speed runs on a
GPU host that cannot receive the trained weights (their accuracy figures mean nothing; what a
step holds on the device does not depend on the values):

  random_teacher.py fashion-mnist OUT.pt             train_teacher.py's CNN (421,738 parameters)
  random_teacher.py minilm CONFIG.json OUT.pt        bert.py's encoder in all-MiniLM-L6-v2's shape
  random_teacher.py smollm2 TEACHER.json OUT.pt      llama.py's decoder in SmolLM2-135M's shape"""
import json
import sys

import torch

kind, *args = sys.argv[1:]
torch.manual_seed(0)
if kind == "fashion-mnist":
    from distill_tools.fashion_mnist.train_teacher import TeacherCNN

    model, out = TeacherCNN().eval(), args[0]
    torch.jit.script(model).save(out)
elif kind == "minilm":
    from distill_tools.minilm.bert import BertConfig, BertSentenceEncoder, scripted

    model, out = BertSentenceEncoder(BertConfig.from_json(json.load(open(args[0])))), args[1]
    scripted(model).save(out)
elif kind == "smollm2":
    from distill_tools.smollm2.llama import Llama, LlamaConfig, scripted

    model, out = Llama(LlamaConfig(**json.load(open(args[0]))["config"])), args[1]
    with torch.no_grad():  # small weights keep random logits finite in 16-bit
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.02)
    scripted(model).save(out)
else:
    sys.exit(f"random_teacher.py: unknown kind {kind!r}")
print(f"random_teacher: {kind}, {sum(p.numel() for p in model.parameters()):,} parameters -> {out}")
