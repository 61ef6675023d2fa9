"""Probes of the CUDA caching allocator's hidden terms, one fresh process per probe.

Each probe prints JSON lines {probe, step, allocated, reserved, peak, segments}: bytes from
torch.cuda.memory_stats after each step, and the sizes of the allocator's blocks that are live
(from torch.cuda.memory_snapshot). Run: python3 bench/gpu/allocator_probe.py [PROBE...]
"""
import json
import subprocess
import sys
import threading

PROBES = {}


def probe(fn):
    PROBES[fn.__name__] = fn
    return fn


def stats(name, step, torch):
    s = torch.cuda.memory_stats()
    blocks = []
    for seg in torch.cuda.memory_snapshot():
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                blocks.append(b["size"])
    big = sorted((b for b in blocks if b >= 1 << 20), reverse=True)[:12]
    print(json.dumps({"probe": name, "step": step, "allocated": s["allocated_bytes.all.current"],
                      "peak": s["allocated_bytes.all.peak"], "reserved": s["reserved_bytes.all.current"],
                      "reserved_peak": s["reserved_bytes.all.peak"], "n_blocks": len(blocks),
                      "blocks_ge_1mib": big}), flush=True)


@probe
def workspaces():
    """cuBLAS / cuBLASLt workspaces: per thread (autograd's device thread), per dtype path."""
    import torch
    import torch.nn.functional as F
    d = "cuda"
    x = torch.randn(64, 784, device=d)
    w = torch.randn(256, 784, device=d, requires_grad=True)
    b = torch.randn(256, device=d, requires_grad=True)
    stats("workspaces", "tensors", torch)
    with torch.no_grad():
        y = x @ w.t()
    torch.cuda.synchronize(); stats("workspaces", "fp32 mm no_grad (main thread)", torch)
    with torch.no_grad():
        y = F.linear(x, w, b)
    torch.cuda.synchronize(); stats("workspaces", "fp32 addmm no_grad", torch)
    y = F.linear(x, w, b)
    y.sum().backward()
    torch.cuda.synchronize(); stats("workspaces", "fp32 backward (autograd thread)", torch)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = F.linear(x, w, b)
    torch.cuda.synchronize(); stats("workspaces", "bf16 autocast forward (cast cache held)", torch)
    y.float().sum().backward()
    torch.cuda.synchronize(); stats("workspaces", "bf16 autocast backward", torch)
    del y
    xb, wb, bb = x.bfloat16(), w.detach().bfloat16(), b.detach().bfloat16()
    with torch.no_grad():
        z = F.linear(xb, wb, bb)
    torch.cuda.synchronize(); stats("workspaces", "pure bf16 addmm", torch)
    out = {}

    def other():
        with torch.no_grad():
            out["z"] = x @ w.t()
        torch.cuda.synchronize()
    t = threading.Thread(target=other); t.start(); t.join()
    stats("workspaces", "fp32 mm on another thread", torch)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s), torch.no_grad():
        z = x @ w.t()
    torch.cuda.synchronize(); stats("workspaces", "fp32 mm on another stream", torch)


@probe
def conv_cnn():
    """cuDNN workspace of the Fashion-MNIST CNNs: teacher forward at 256 (eval), student step at 128."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    d = "cuda"
    print(json.dumps({"probe": "conv_cnn", "cudnn": torch.backends.cudnn.version(),
                      "benchmark": torch.backends.cudnn.benchmark}), flush=True)
    t = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10)).to(d).eval()
    x = torch.randn(256, 1, 28, 28, device=d)
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); stats("conv_cnn", "teacher loaded, x 256", torch)
    with torch.no_grad():
        y = t[0](x)
    torch.cuda.synchronize(); stats("conv_cnn", "teacher conv1 256 (out 3.06 MiB)", torch)
    with torch.no_grad():
        y = t(x)
    torch.cuda.synchronize(); stats("conv_cnn", "teacher forward 256", torch)
    del y
    s = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(784, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10)).to(d)
    xs = torch.randn(128, 1, 28, 28, device=d)
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); stats("conv_cnn", "student loaded", torch)
    out = s(xs)
    torch.cuda.synchronize(); stats("conv_cnn", "student forward 128", torch)
    out.sum().backward()
    torch.cuda.synchronize(); stats("conv_cnn", "student backward 128", torch)
    for bs in (64, 128, 512, 4096):
        xs = torch.randn(bs, 1, 28, 28, device=d)
        torch.cuda.synchronize(); base = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
        s(xs).sum().backward(); torch.cuda.synchronize()
        print(json.dumps({"probe": "conv_cnn", "step": f"student step {bs}: peak over base",
                          "over": torch.cuda.max_memory_allocated() - base}), flush=True)


@probe
def lm_loss():
    """distill's whole-sequence KD loss of a causal LM (objective/logit_kd.rs, kd.loss_chunk = 0)
    at the SmolLM2 student's shapes: student logits [8, 128, 49152] bf16 (autocast's output),
    the teacher's as distill holds them (fp32), next-token labels with the last position
    ignored. Peak over the live logits, in the forward of the loss and in its backward."""
    import torch
    d, (b, s, v) = "cuda", (8, 128, 49152)
    torch.ones(2, 2, device=d) @ torch.ones(2, 2, device=d)
    student = torch.randn(b, s, v, device=d, dtype=torch.bfloat16, requires_grad=True)
    teacher = torch.randn(b, s, v, device=d)
    labels = torch.randint(0, v, (b, s), device=d)
    labels[:, -1] = -100
    one = b * s * v * 4
    torch.cuda.synchronize(); base = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
    flat = labels.reshape(-1)
    keep = flat.ge(0).nonzero().squeeze(1)
    st, tt, y = student.flatten(0, 1).index_select(0, keep), teacher.flatten(0, 1).index_select(0, keep), flat.index_select(0, keep)
    s32 = st.float()
    ce = torch.nn.functional.nll_loss(s32.log_softmax(-1), y)
    s_logp = (s32 / 1.0).log_softmax(-1)
    t_logp = (tt.float() / 1.0).log_softmax(-1)
    kd = torch.nn.functional.kl_div(s_logp, t_logp, reduction="sum", log_target=True) / st.shape[0]
    loss = 0.5 * kd + 0.5 * ce
    torch.cuda.synchronize()
    fwd_peak, after = torch.cuda.max_memory_allocated() - base, torch.cuda.memory_allocated() - base
    del st, tt, s32, s_logp, t_logp
    torch.cuda.reset_peak_memory_stats()
    loss.backward()
    torch.cuda.synchronize()
    print(json.dumps({"probe": "lm_loss", "fp32_bsv_bytes": one, "forward_peak_over_logits": fwd_peak,
                      "held_after_forward": after, "backward_peak_over_base": torch.cuda.max_memory_allocated() - base,
                      "forward_peak_in_fp32_bsv": fwd_peak / one, "held_in_fp32_bsv": after / one,
                      "backward_peak_in_fp32_bsv": (torch.cuda.max_memory_allocated() - base) / one}), flush=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        PROBES[sys.argv[2]]()
        return
    for n in sys.argv[1:] or list(PROBES):
        r = subprocess.run([sys.executable, __file__, "--one", n], capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stdout)
        if r.returncode:
            print(json.dumps({"probe": n, "error": r.stderr[-2000:]}), flush=True)


if __name__ == "__main__":
    main()
