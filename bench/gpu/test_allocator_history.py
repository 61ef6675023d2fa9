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
        # with C++ stacks, the recorder's and the allocator's own frames come first
        frames = [{"name": "torch::unwind::unwind()", "filename": "unwind.cpp", "line": 1},
                  {"name": "torch::CapturedTraceback::gather(bool, bool, bool)", "filename": "x", "line": 2},
                  {"name": "c10::cuda::CUDACachingAllocator::Native::malloc", "filename": "y", "line": 3},
                  {"name": "at::detail::empty_generic", "filename": "EmptyTensor.cpp", "line": 4},
                  {"name": "at::native::addmm_out_cuda", "filename": "Blas.cpp", "line": 7}]
        snap = {"device_traces": [[
            ev("segment_alloc", 0, 20 * MIB), ev("alloc", 0, 2 * MIB),
            ev("alloc", 2 * MIB, 1000),
            ev("free_requested", 0, 2 * MIB), ev("free_completed", 0, 2 * MIB),
            ev("segment_alloc", 100 * MIB, 12 * MIB), ev("alloc", 100 * MIB, 12 * MIB - 100, frames),
            ev("free_requested", 100 * MIB, 12 * MIB - 100), ev("free_completed", 100 * MIB, 12 * MIB - 100),
            ev("segment_free", 100 * MIB, 12 * MIB),
        ]]}
        out = io.StringIO()
        peak_reserved, peak_requested, opened, n = summarise(snap, 10.0, out)
        # 20 + 12 MiB reserved at once; 1000 B + 12 MiB - 100 B requested at once (the 2 MiB
        # block was given back first): the bytes asked for, not the blocks' rounded sizes
        self.assertEqual((peak_reserved, peak_requested, n), (32 * MIB, 12 * MIB + 900, 3))
        self.assertEqual([(i, seg, size) for i, seg, size, _ in opened],
                         [(0, 20 * MIB, 2 * MIB), (2, 12 * MIB, 12 * MIB - 100)])
        # the recorder's, the allocator's and the factory's frames are skipped
        self.assertEqual(opened[1][3], "at::native::addmm_out_cuda (Blas.cpp:7)")
        # a block is back in the pool at free_completed
        self.assertEqual(out.getvalue().splitlines(),
                         ["A 2097152 0", "A 1000 200000", "F 0", "A 12582812 6400000", "F 6400000"])


if __name__ == "__main__":
    unittest.main()
