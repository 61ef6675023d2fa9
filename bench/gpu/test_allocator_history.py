"""allocator_history.summarise on a hand-made snapshot in the layout of PyTorch's
(`device_traces` of `alloc`, `free_completed`, `segment_alloc` and `segment_free` events)."""
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from allocator_history import summarise  # noqa: E402

MIB = 1 << 20


def ev(action, addr, size, frames=None):
    e = {"action": action, "addr": addr, "size": size, "stream": 0}
    if frames:
        e["frames"] = frames
    return e


class Summarise(unittest.TestCase):
    def test_peaks_segments_and_the_request_stream(self):
        frames = [{"name": "c10::cuda::CUDACachingAllocator::malloc", "filename": "x", "line": 1},
                  {"name": "at::native::addmm_out_cuda", "filename": "Blas.cpp", "line": 7}]
        snap = {"device_traces": [[
            ev("segment_alloc", 0, 20 * MIB), ev("alloc", 0, 2 * MIB),
            ev("alloc", 2 * MIB, 3 * MIB),
            ev("free_completed", 0, 2 * MIB),
            ev("segment_alloc", 100 * MIB, 12 * MIB), ev("alloc", 100 * MIB, 12 * MIB, frames),
            ev("free_completed", 100 * MIB, 12 * MIB), ev("segment_free", 100 * MIB, 12 * MIB),
        ]]}
        out = io.StringIO()
        peak_reserved, peak_allocated, opened, n = summarise(snap, 10.0, out)
        # 20 + 12 MiB reserved at once; 3 + 12 MiB allocated at once (the 2 MiB block was freed)
        self.assertEqual((peak_reserved, peak_allocated, n), (32 * MIB, 15 * MIB, 3))
        self.assertEqual([(i, seg, size) for i, seg, size, _ in opened],
                         [(0, 20 * MIB, 2 * MIB), (2, 12 * MIB, 12 * MIB)])
        # the allocator's own frame is skipped
        self.assertEqual(opened[1][3], "at::native::addmm_out_cuda (Blas.cpp:7)")
        self.assertEqual(out.getvalue().splitlines(),
                         ["A 2097152 0", "A 3145728 200000", "F 0", "A 12582912 6400000", "F 6400000"])


if __name__ == "__main__":
    unittest.main()
