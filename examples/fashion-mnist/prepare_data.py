"""Convert Debian's dataset-fashion-mnist (gzip'd idx files) into the .npz layout `distill` reads.

Writes OUT/train.npz (60,000 samples) and OUT/test.npz (10,000 samples), each with
  x: uint8 [N, 1, 28, 28]   raw pixels 0..255 (the student config scales them)
  y: int64 [N]              class ids 0..9
Usage: python prepare_data.py [SRC_DIR] [OUT_DIR]
"""
import gzip
import os
import sys

import numpy as np

SRC = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"
OUT = sys.argv[2] if len(sys.argv) > 2 else "data/fashion-mnist"


def read_idx(path, header, magic):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    got = int.from_bytes(raw[:4], "big")
    if got != magic:
        sys.exit(f"{path}: idx magic {got:#x}, expected {magic:#x}: not a Fashion-MNIST idx file")
    return np.frombuffer(raw, dtype=np.uint8, offset=header)


def split(prefix):
    images = read_idx(os.path.join(SRC, f"{prefix}-images-idx3-ubyte.gz"), 16, 0x803)
    labels = read_idx(os.path.join(SRC, f"{prefix}-labels-idx1-ubyte.gz"), 8, 0x801)
    x = images.reshape(-1, 1, 28, 28)
    if x.shape[0] != labels.shape[0]:
        sys.exit(f"{SRC}/{prefix}: {x.shape[0]} images but {labels.shape[0]} labels")
    return x, labels.astype(np.int64)


def save(name, x, y):
    path = os.path.join(OUT, name)
    tmp = path + ".tmp.npz"
    np.savez(tmp, x=x, y=y)
    os.replace(tmp, path)


os.makedirs(OUT, exist_ok=True)
x_train, y_train = split("train")
x_test, y_test = split("t10k")
# Golden checks (docs/data-and-teachers.md section 1): the decoded content must be upstream's.
assert y_train[:10].tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5], "train labels differ from upstream"
assert y_test[:10].tolist() == [9, 2, 1, 1, 6, 1, 4, 6, 5, 7], "test labels differ from upstream"
assert abs(x_train.mean() / 255 - 0.2860) < 5e-4, "train pixel mean differs from upstream"
save("train.npz", x_train, y_train)
save("test.npz", x_test, y_test)
print(f"wrote {OUT}/train.npz {x_train.shape} and {OUT}/test.npz {x_test.shape}")
