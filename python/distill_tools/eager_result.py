"""The one result format of the plain-PyTorch (eager) training loops `bench/throughput/kd_eager.py`
(image students) and `kd_eager_text.py` (sentence encoders): one JSON line on stdout, the last
line the script prints, which `bench/throughput/bench.py` reads back beside distill's report.json.

Keys, in this order (units in brackets; None where a side has no such figure):
- side: `eager`, or `eager+compile` under `torch.compile`
- precision: fp32, bf16 or fp16; device: cpu or cuda
- peak_allocated_bytes, peak_reserved_bytes: the CUDA caching allocator's peaks over the
  training loop [bytes] (None on the CPU)
- threads: torch's intra-op threads; epochs; batch_size; steps (optimiser updates); samples
- samples_per_s: samples / train_seconds (distill's report's definition); train_seconds: the
  summed time of the training steps [s]; loop_seconds: the loop's wall time, evaluation
  included [s]
- first_loss: the first step's loss; first_window_loss: the mean loss of the first `log_every`
  steps (distill's first metrics line); log_every
- test_accuracy: the held-out figure (accuracy, or mean cosine with the teacher for an encoder);
  agreement: agreement with the teacher (top-1, or mean cosine); teacher_accuracy (NaN unknown)
- teacher_cache_seconds: the one teacher pass before training [s]
- order: `distill` (the trainer's batch order) or `randperm`
- wall_seconds: the whole job from process start [s]
"""
import json

KEYS = (
    "side", "precision", "device", "peak_allocated_bytes", "peak_reserved_bytes", "threads", "epochs",
    "batch_size", "steps", "samples", "samples_per_s", "train_seconds", "loop_seconds", "first_loss",
    "first_window_loss", "log_every", "test_accuracy", "agreement", "teacher_accuracy",
    "teacher_cache_seconds", "order", "wall_seconds",
)


def eager_result_line(**fields) -> str:
    """The JSON line of one eager run, keys in `KEYS` order. Errors: TypeError naming the missing
    and unknown keys when `fields` is not exactly `KEYS`."""
    missing = [k for k in KEYS if k not in fields]
    unknown = [k for k in fields if k not in KEYS]
    if missing or unknown:
        raise TypeError(f"eager result: missing keys {missing}, unknown keys {unknown}; want exactly {list(KEYS)}")
    return json.dumps({k: fields[k] for k in KEYS})


def read_eager_result(stdout: str) -> dict:
    """The result of an eager run from its whole stdout (the last line). Errors: IndexError on
    empty output, json.JSONDecodeError when the last line is not the result."""
    return json.loads(stdout.strip().splitlines()[-1])
