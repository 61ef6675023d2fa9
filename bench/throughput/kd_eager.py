"""The knowledge-distillation loop a PyTorch user would write by hand, for the students `distill`
builds from a cfg.toml: the reference side of `scripts/bench-throughput`.

It trains the same thing as `distill --teacher T --student CFG`:
- the student of `[student]` (mlp or cnn), its layers and parameter names as the trainer builds
  them (`estimator-wasm/src/schema/arch.rs::layers`, `distill/src/student/layered.rs`): conv blocks
  conv(kernel, same padding, no bias under BatchNorm) -> BatchNorm2d -> activation -> 2x2 pool,
  then flatten, fc blocks linear -> norm -> activation -> dropout, then `head`;
- inputs `(x * scale - mean) / std` per channel in fp32 (`distill/src/inputs/data/normalize.rs`);
- teacher logits computed once for the train set before training (`teacher.cache_logits = true`),
  the teacher's test predictions once for the agreement figure;
- the loss `alpha * T^2 * KL(softmax(t/T) || softmax(s/T)) [batchmean] + (1 - alpha) * CE`, both
  log-softmaxes in fp32 (`distill/src/train/objective/logit_kd.rs`);
- AdamW (decoupled decay on conv/linear weights only) or SGD, the learning rate of each step from
  linear warm-up then cosine to `min_lr` (`distill/src/train/optim.rs`, `distill/src/train/schedule.rs`);
- batches of each epoch from a seeded permutation: `--order FILE` reads the trainer's own
  permutations (written by `cargo run --release -p distill --example epoch_order`), so both sides
  visit the same batches; without it, `torch.randperm` (same sizes, different order);
- fp32, or bf16 autocast on the student's forward (`torch.autocast`), losses in fp32; on CUDA
  also fp16 autocast with `torch.amp.GradScaler` (the recipe of PyTorch's AMP guide);
- `--device cuda`: the data, teacher and student on the GPU (the data moved once), and the
  caching allocator's peak allocated and reserved bytes of the training loop in the JSON line;
- a test evaluation after every epoch, then the student saved as safetensors and TorchScript.

Usage:
  kd_eager.py --student CFG --write-init OUT.safetensors      # initial weights for both sides
  kd_eager.py --student CFG --teacher T.pt [--init INIT] [--order FILE] [--epochs N]
              [--batch-size B] [--precision fp32|bf16|fp16] [--device cpu|cuda] [--threads N]
              [--compile] [--out DIR] [--steps N]

Prints one JSON line: training samples/s (the same definition as distill's report: samples over
the summed time of the training steps, each from its batch's gather to the optimiser update and
the loss read back), the first step's loss, the mean loss of the first `log_every` steps (what
distill's first metrics line holds), the final test accuracy, the teacher-cache seconds and the
wall time of the whole job.
"""
import argparse
import json
import math
import os
import struct
import sys
import time
import tomllib
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from distill_tools.eager_result import eager_result_line

START = time.perf_counter()

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "BF16": torch.bfloat16, "F16": torch.float16}


def write_safetensors(tensors, path):
    """The safetensors format: u64 header length, JSON header (dtype, shape, offsets), raw data."""
    header, blobs, offset = {}, [], 0
    names = {v: k for k, v in DTYPES.items()}
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        dtype = DTYPES[h["dtype"]]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=dtype).reshape(h["shape"]).clone()
    return out


ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,  # exact (approximate="none"), as distill
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "leaky_relu": nn.LeakyReLU,
}


def build_student(student, data):
    """nn.Sequential with distill's layer ids as module names, so state_dict names match."""
    family = student.get("family", "mlp")
    if family not in ("mlp", "cnn"):
        raise SystemExit(f"kd_eager.py builds mlp and cnn students, not {family!r}")
    norm = student.get("norm", "none")
    act = ACTIVATIONS[student.get("activation", "relu")]
    pool = student.get("pool", "max")
    dropout = float(student.get("dropout", 0.0))
    shape = list(data["input_shape"])
    layers = OrderedDict()
    if family == "cnn":
        kernel = int(student.get("kernel", 3))
        for i, out in enumerate(student.get("channels", [])):
            name = f"conv{i + 1}"
            layers[name] = nn.Conv2d(shape[0], out, kernel, padding=kernel // 2, bias=norm != "batch")
            shape[0] = out
            if norm == "batch":
                layers[f"{name}_bn"] = nn.BatchNorm2d(out)
            layers[f"{name}_act"] = act()
            if pool != "none":
                layers[f"{name}_pool"] = nn.MaxPool2d(2) if pool == "max" else nn.AvgPool2d(2)
                shape = [shape[0], shape[1] // 2, shape[2] // 2]
    if len(shape) > 1:
        layers["flatten"] = nn.Flatten()
        shape = [math.prod(shape)]
    for j, out in enumerate(student.get("hidden", [])):
        name = f"fc{j + 1}"
        layers[name] = nn.Linear(shape[0], out)
        shape = [out]
        if norm == "batch":
            layers[f"{name}_norm"] = nn.BatchNorm1d(out)
        elif norm == "layer":
            layers[f"{name}_norm"] = nn.LayerNorm(out)
        layers[f"{name}_act"] = act()
        if dropout > 0:
            layers[f"{name}_drop"] = nn.Dropout(dropout)
    layers["head"] = nn.Linear(shape[0], data["classes"])
    return nn.Sequential(layers)


def init_tensors(model):
    """The model's state in distill's names (BatchNorm's num_batches_tracked has no counterpart)."""
    return OrderedDict((k, v) for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked"))


def load_npz(path, data):
    d = np.load(path)
    x = torch.from_numpy(d["x"])
    y = torch.from_numpy(d["y"].astype(np.int64))
    return x, y


class Normalizer:
    """`(x * scale - mean) / std` per channel, in fp32 (distill/src/inputs/data/normalize.rs)."""

    def __init__(self, data, rank):
        self.scale = float(data.get("scale", 1.0))
        shape = [-1] + [1] * (rank - 2) if rank > 2 else [-1]
        mean, std = data.get("mean", []), data.get("std", [])
        self.mean = torch.tensor(mean, dtype=torch.float32).reshape(shape) if mean else None
        self.std = torch.tensor(std, dtype=torch.float32).reshape(shape) if std else None

    def to(self, device):
        """The same normalisation with its statistics on `device`."""
        self.mean = None if self.mean is None else self.mean.to(device)
        self.std = None if self.std is None else self.std.to(device)
        return self

    def __call__(self, x):
        x = x.float() * self.scale
        if self.mean is not None:
            x -= self.mean
        if self.std is not None:
            x /= self.std
        return x


def lr_at(step, lr, min_lr, warmup, total):
    """distill/src/train/schedule.rs: linear warm-up, then cosine to min_lr at the last step."""
    warmup = min(warmup, total)
    if step < warmup:
        return lr * (step + 1) / warmup
    n = total - warmup
    if n <= 1:
        return lr
    progress = min((step - warmup) / (n - 1), 1.0)
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


class LossLog:
    """The losses both sides of the benchmark compare: the first step's and the mean of the first
    `window` steps (distill's first metrics line). A non-finite loss stops the run."""

    def __init__(self, window):
        self.window, self.values, self.first, self.first_window = window, [], None, None

    def record(self, value, step):
        """`value`, the loss of step `step` (1-based)."""
        if not math.isfinite(value):
            raise SystemExit(f"loss {value} at step {step}")
        if self.first is None:
            self.first = value
        if len(self.values) < self.window:
            self.values.append(value)
            if len(self.values) == self.window:
                self.first_window = sum(self.values) / self.window


def kd_loss(student_logits, teacher_logits, y, temperature, alpha):
    s = student_logits.float()
    ce = F.cross_entropy(s, y)
    if alpha <= 0:
        return ce * (1 - alpha)
    s_logp = F.log_softmax(s / temperature, dim=-1)
    t_logp = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    kd = F.kl_div(s_logp, t_logp, reduction="batchmean", log_target=True) * temperature**2
    return alpha * kd + (1 - alpha) * ce


@torch.no_grad()
def predict(model, x, norm, batch):
    outs = [model(norm(x[i : i + batch])) for i in range(0, len(x), batch)]
    return torch.cat(outs)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--student", required=True, help="cfg.toml")
    p.add_argument("--teacher", help="TorchScript teacher")
    p.add_argument("--write-init", metavar="OUT", help="write the seeded initial weights and exit")
    p.add_argument("--init", help="safetensors of initial weights (as distill's student.init)")
    p.add_argument("--order", help="epoch orders from distill's epoch_order example (int64 [epochs, n])")
    p.add_argument("--epochs", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--compile", action="store_true", help="torch.compile the student")
    p.add_argument("--steps", type=int, help="stop after this many steps (the schedule still counts the full run)")
    p.add_argument("--out", help="folder for student.safetensors and student.pt")
    args = p.parse_args()

    with open(args.student, "rb") as f:
        cfg = tomllib.load(f)
    base = os.path.dirname(os.path.abspath(args.student))
    data, student, kd, train = cfg["data"], cfg.get("student", {}), cfg.get("kd", {}), cfg.get("train", {})
    seed = int(train.get("seed", 0))
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(seed)
    model = build_student(student, data)
    if args.write_init:
        write_safetensors(init_tensors(model), args.write_init)
        print(json.dumps({"wrote": args.write_init, "params": sum(p.numel() for p in model.parameters())}))
        return
    if not args.teacher:
        raise SystemExit("--teacher is required to train")
    if args.init:
        state = read_safetensors(args.init)
        missing = [k for k in init_tensors(model) if k not in state]
        if missing:
            raise SystemExit(f"{args.init} lacks {missing}")
        model.load_state_dict(state, strict=False)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this torch sees no CUDA device")
    model.to(device)

    epochs = args.epochs or int(train.get("epochs", 10))
    batch = args.batch_size or int(train.get("batch_size", 128))
    precision = args.precision or train.get("precision", "fp32")
    if precision == "fp16" and device.type != "cuda":
        raise SystemExit("--precision fp16 is for --device cuda (fp16 autocast with a GradScaler)")
    eval_batch = int(train.get("eval_batch_size", 256))  # distill's default (schema/defaults.rs)
    temperature, alpha = float(kd.get("temperature", 4.0)), float(kd.get("alpha", 0.5))
    log_every = int(train.get("log_every", 50))

    # Load data and the teacher; teacher test predictions and the train-set logit cache.
    x_train, y_train = (t.to(device) for t in load_npz(os.path.join(base, data["train"]), data))
    x_test, y_test = (t.to(device) for t in load_npz(os.path.join(base, data["test"]), data))
    norm = Normalizer(data, x_train.dim()).to(device)
    teacher = torch.jit.load(args.teacher, map_location=device).eval()
    cache_start = time.perf_counter()
    teacher_test = predict(teacher, x_test, norm, eval_batch).argmax(-1)
    soft = predict(teacher, x_train, norm, eval_batch)
    cache_seconds = time.perf_counter() - cache_start
    teacher_accuracy = (teacher_test == y_test).float().mean().item()

    # Batches: n / b full ones and the rest, a last batch of one dropped under BatchNorm1d.
    n = len(x_train)
    size = min(batch, n)
    full, rest = divmod(n, size)
    # BatchNorm1d (an fc block's norm) sees one value per channel in a batch of one sample.
    dropped = rest == 1 and student.get("norm") == "batch" and bool(student.get("hidden"))
    steps_per_epoch = full + (1 if rest and not dropped else 0)
    total = steps_per_epoch * epochs
    if args.order:
        orders = torch.from_numpy(np.fromfile(args.order, "<i8").reshape(-1, n))
        if len(orders) < epochs:
            raise SystemExit(f"{args.order} holds {len(orders)} epoch orders, {epochs} needed")
    else:
        gen = torch.Generator().manual_seed(seed)
        orders = torch.stack([torch.randperm(n, generator=gen) for _ in range(epochs)])
    orders = orders.to(device)

    decay = [p for name, p in model.named_parameters() if name.endswith(".weight") and p.dim() >= 2]
    other = [p for name, p in model.named_parameters() if not (name.endswith(".weight") and p.dim() >= 2)]
    wd = float(train.get("weight_decay", 0.01))
    groups = [{"params": decay, "weight_decay": wd}, {"params": other, "weight_decay": 0.0}]
    lr, min_lr = float(train.get("lr", 1e-3)), float(train.get("min_lr", 0.0))
    if train.get("optimizer", "adamw") == "sgd":
        opt = torch.optim.SGD(
            groups, lr=lr, momentum=float(train.get("momentum", 0.9)), nesterov=bool(train.get("nesterov", False))
        )
    else:
        betas = tuple(train.get("betas", [0.9, 0.999]))
        opt = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=float(train.get("eps", 1e-8)))
    forward = torch.compile(model) if args.compile else model
    autocast = precision != "fp32"
    half = torch.float16 if precision == "fp16" else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    step, train_seconds, samples = 0, 0.0, 0
    log = LossLog(min(log_every, total))
    test_accuracy = agreement = float("nan")
    train_start = time.perf_counter()
    stop = args.steps or total
    for epoch in range(epochs):
        model.train()
        order = orders[epoch]
        loss_sum = correct = seen = 0.0
        epoch_start_seconds = train_seconds
        for i in range(steps_per_epoch):
            if step >= stop:
                break
            t0 = time.perf_counter()
            idx = order[i * size : (i + 1) * size]
            x, y, t = norm(x_train[idx]), y_train[idx], soft[idx]
            for g in opt.param_groups:
                g["lr"] = lr_at(step, lr, min_lr, int(train.get("warmup_steps", 0)), total)
            with torch.autocast(device.type, dtype=half, enabled=autocast):
                out = forward(x)
            loss = kd_loss(out, t, y, temperature, alpha)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            value = loss.item()  # reads the loss back: on CUDA the step has finished
            correct += (out.argmax(-1) == y).sum().item()
            train_seconds += time.perf_counter() - t0
            log.record(value, step + 1)
            samples += len(idx)
            seen += len(idx)
            loss_sum += value * len(idx)
            step += 1
        model.eval()
        preds = predict(model, x_test, norm, eval_batch).argmax(-1)
        test_accuracy = (preds == y_test).float().mean().item()
        agreement = (preds == teacher_test).float().mean().item()
        print(
            f"epoch {epoch + 1}/{epochs}: loss {loss_sum / max(seen, 1):.4f} train acc {correct / max(seen, 1):.4f}"
            f" test acc {test_accuracy:.4f} {seen / max(train_seconds - epoch_start_seconds, 1e-9):.0f} samples/s",
            file=sys.stderr,
            flush=True,
        )
        if step >= stop:
            break
    loop_seconds = time.perf_counter() - train_start
    cuda = device.type == "cuda"
    peak_allocated = torch.cuda.max_memory_allocated() if cuda else None
    peak_reserved = torch.cuda.max_memory_reserved() if cuda else None

    if args.out:
        os.makedirs(args.out, exist_ok=True)
        write_safetensors(init_tensors(model), os.path.join(args.out, "student.safetensors"))
        model.to("cpu")
        example = norm.to("cpu")(x_test[:1].cpu())
        torch.jit.trace(model.eval(), example).save(os.path.join(args.out, "student.pt"))

    print(
        eager_result_line(
            side="eager" + ("+compile" if args.compile else ""),
            precision=precision,
            device=args.device,
            peak_allocated_bytes=peak_allocated,
            peak_reserved_bytes=peak_reserved,
            threads=torch.get_num_threads(),
            epochs=epochs,
            batch_size=size,
            steps=step,
            samples=samples,
            samples_per_s=samples / max(train_seconds, 1e-9),
            train_seconds=train_seconds,
            loop_seconds=loop_seconds,
            first_loss=log.first,
            first_window_loss=log.first_window,
            log_every=log_every,
            test_accuracy=test_accuracy,
            agreement=agreement,
            teacher_accuracy=teacher_accuracy,
            teacher_cache_seconds=cache_seconds,
            order="distill" if args.order else "randperm",
            wall_seconds=time.perf_counter() - START,
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
