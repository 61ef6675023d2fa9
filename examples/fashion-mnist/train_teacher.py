"""Train the Fashion-MNIST teacher CNN and save it as TorchScript, as a PyTorch user would.

The teacher is the user's artifact, not part of `distill`: any TorchScript module whose forward
maps a float batch [N, 1, 28, 28] (already normalised) to logits [N, 10] will do.

Usage: python train_teacher.py DATA_DIR OUT.pt [--epochs N] [--seed S]
Prints the test accuracy; exits non-zero if it is below --min-accuracy (default 0.91).
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST train pixel mean/std of x/255


class TeacherCNN(nn.Module):
    """conv32-BN-ReLU-pool, conv64-BN-ReLU-pool, fc128, dropout, fc10: ~421k parameters."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = self.drop(F.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)


def load(path):
    d = np.load(path)
    x = torch.from_numpy(d["x"]).float().div_(255).sub_(MEAN).div_(STD)
    return x, torch.from_numpy(d["y"]).long()


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(x[i : i + 1000]).argmax(1) for i in range(0, len(x), 1000)])
    return (pred == y).float().mean().item()


def progress_line(epoch, epochs, done, total, seconds, batch_size=128):
    """The progress of an epoch: a bar of 20 cells, the batches done and left of the epoch, the
    images, the rate, and the time the epoch has left at that rate, e.g.
    "epoch 1/8 [####................] batch 100/469, 369 left: 12,800/60,000 images (21%), 410 images/s, 1 min 55 s left"."""
    rate = done / seconds if seconds > 0 else 0.0
    left = (total - done) / rate if rate > 0 else 0.0
    minutes, secs = divmod(int(round(left)), 60)
    eta = f"{minutes} min {secs} s" if minutes else f"{secs} s"
    batches = -(-total // batch_size)
    batch = -(-done // batch_size)
    cells = 20 * done // total
    return (f"epoch {epoch}/{epochs} [{'#' * cells}{'.' * (20 - cells)}] batch {batch}/{batches}, "
            f"{batches - batch} left: {done:,}/{total:,} images ({100 * done // total}%), "
            f"{rate:,.0f} images/s, {eta} left")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("out")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-accuracy", type=float, default=0.91)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    x_train, y_train = load(os.path.join(args.data_dir, "train.npz"))
    x_test, y_test = load(os.path.join(args.data_dir, "test.npz"))
    model = TeacherCNN()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    steps = args.epochs * ((len(x_train) + args.batch_size - 1) // args.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps)
    start = time.time()
    # progress on stderr: in place on a terminal, else a line every 5% of an epoch or every 30 s,
    # whichever comes first (an epoch takes minutes on 2 shared cores)
    tty = sys.stderr.isatty()
    print(f"training the teacher: {args.epochs} epochs of {len(x_train):,} images", file=sys.stderr, flush=True)
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(len(x_train))
        epoch_start, shown, last = time.time(), 0, time.time()
        for i in range(0, len(x_train), args.batch_size):
            idx = perm[i : i + args.batch_size]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            done = min(i + args.batch_size, len(x_train))
            twentieth = 20 * done // len(x_train)
            now = time.time()
            if (tty or twentieth > shown or now - last >= 30) and done < len(x_train):
                shown, last = twentieth, now
                line = progress_line(epoch + 1, args.epochs, done, len(x_train), now - epoch_start, args.batch_size)
                print(f"\r{line}\033[K" if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)
        if tty:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
        acc = accuracy(model, x_test, y_test)
        print(f"epoch {epoch + 1}/{args.epochs}  loss {loss.item():.4f}  test accuracy {acc:.4f}"
              f"  ({time.time() - start:.0f} s)", flush=True)

    model.eval()
    scripted = torch.jit.script(model)
    tmp = args.out + ".tmp"
    scripted.save(tmp)
    os.replace(tmp, args.out)
    print(f"saved {args.out}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"test accuracy {acc:.4f}")
    if acc < args.min_accuracy:
        raise SystemExit(f"teacher test accuracy {acc:.4f} is below {args.min_accuracy}")


if __name__ == "__main__":
    main()
