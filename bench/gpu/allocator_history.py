"""What a CUDA run's allocator did, from `distill --cuda-memory-history FILE` (PyTorch's pickled
memory snapshot: `device_traces`, one list of events per device, each a dict with `action`,
`addr`, `size`, `stream` and, with DISTILL_CUDA_MEMORY_STACKS=1, `frames`).

    python3 bench/gpu/allocator_history.py FILE [--requests OUT] [--segments MIB]

prints the recorded peak reserved bytes (the sum of `segment_alloc` less `segment_free`, as
`torch.cuda.max_memory_reserved` counts them) and the peak of requested bytes (each `alloc`
event carries the bytes asked for, before the allocator rounds them, and `free_requested`
gives them back, as `requested_bytes` counts them: a little under `max_memory_allocated`), and
each segment of at least MIB (default 10) with the request that opened it and that request's
innermost frames outside the allocator and the recorder; --requests writes the run's requests
(`alloc`, and `free_completed`, when the block is back in the allocator's pool) as the stream
that `cargo run -p estimator-wasm --example replay_requests -- OUT` replays on the plan's model
of the allocator. The replay reaching the recorded peak reserved says the model's rules hold and
a miss of the plan is in its order of requests; the replay short of it says a rule is missing.
"""
import argparse
import pickle
import sys

MIB = 1 << 20


def events(snapshot):
    """Every device's events, in order, one list after the other."""
    for trace in snapshot.get("device_traces", []):
        yield from trace


# frames that are the recorder, the allocator or the dispatcher, not the op (as
# torch.cuda._memory_viz's own filter, and the factory functions every op calls)
OMIT_NAMES = ("unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "CachingAllocator",
              "at::detail::empty", "at::empty", "at::_ops::empty", "_start", "__libc_start_main")
OMIT_FILES = ("c10/cuda", "core/boxing", "/Register", "/Redispatch")


def frame_text(frames, n=4):
    """The innermost `n` frames that are the op's, `name (file:line)`."""
    kept = [f for f in frames or [] if not any(o in f.get("name", "") for o in OMIT_NAMES)
            and not any(o in f.get("filename", "") for o in OMIT_FILES)]
    return " < ".join(f"{f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})" for f in kept[:n])


def summarise(snapshot, least_mib=10.0, requests=None):
    """(peak reserved, peak requested, segments opened as (request number, segment bytes,
    request bytes, frames text), requests) of `snapshot`; with `requests` (a file), the request
    stream written."""
    reserved = requested = peak_reserved = peak_requested = 0
    n, opened, pending = 0, [], []
    for e in events(snapshot):
        action, size = e.get("action"), int(e.get("size", 0))
        if action == "segment_alloc":
            reserved += size
            peak_reserved = max(peak_reserved, reserved)
            pending.append(size)
        elif action == "segment_free":
            reserved -= size
        elif action == "alloc":
            requested += size
            peak_requested = max(peak_requested, requested)
            # the recorder logs a segment before the block it was opened for
            for seg in pending:
                if seg >= least_mib * MIB:
                    opened.append((n, seg, size, frame_text(e.get("frames"))))
            pending = []
            if requests:
                requests.write(f"A {size} {e['addr']:x}\n")
            n += 1
        elif action == "free_requested":
            requested -= size
        elif action == "free_completed" and requests:
            requests.write(f"F {e['addr']:x}\n")
    return peak_reserved, peak_requested, opened, n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot")
    ap.add_argument("--requests", help="write the request stream here")
    ap.add_argument("--segments", type=float, default=10.0, help="list segments of at least this many MiB")
    a = ap.parse_args(argv)
    with open(a.snapshot, "rb") as f:
        snapshot = pickle.load(f)
    if not any(True for _ in events(snapshot)):
        sys.exit(f"{a.snapshot}: no allocator events recorded (was the run on CUDA, with --cuda-memory-history?)")
    out = open(a.requests, "w") if a.requests else None
    try:
        peak_reserved, peak_requested, opened, n = summarise(snapshot, a.segments, out)
    finally:
        if out:
            out.close()
    print(f"{n} requests (recorded): peak requested {peak_requested / MIB:.1f} MiB, "
          f"peak reserved {peak_reserved / MIB:.1f} MiB")
    for i, seg, size, where in opened:
        print(f"  request {i:>7}: segment {seg / MIB:.0f} MiB for {size / MIB:.2f} MiB{'  ' + where if where else ''}")


if __name__ == "__main__":
    main()
