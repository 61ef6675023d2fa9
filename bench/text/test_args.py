"""The benchmark's command line and the machine line of its section (bench.py, report.py).

    .venv/bin/python -m unittest bench/text/test_args.py
"""
import os
import unittest
from unittest import mock

from distill_tools.text_bench import bench, report


class Paths(unittest.TestCase):
    def test_a_leading_tilde_is_the_home_folder_where_the_shell_left_it(self):
        with mock.patch.dict(os.environ, {"HOME": "/home/u"}):
            a = bench.parse_args(["--data=~/d", "--teacher=~/t.pt", "--out=~/o", "--student", "main=~/runs/m"])
        self.assertEqual((a.data, a.teacher, a.out), ("/home/u/d", "/home/u/t.pt", "/home/u/o"))
        self.assertEqual(a.students, [("main", "/home/u/runs/m")])
        self.assertEqual(bench.parse_args([]).data, "data/minilm")


class MachineLine(unittest.TestCase):
    def test_says_which_gpu_the_machine_had(self):
        self.assertEqual(report.gpu_words({"cores": 2}), "no GPU")
        self.assertEqual(report.gpu_words({"gpu": None}), "no GPU")
        self.assertEqual(report.gpu_words({"gpu": "NVIDIA H200"}), "a NVIDIA H200 present (not used: the timings are the CPU's)")


class Sections(unittest.TestCase):
    def test_a_section_id_gets_markers_of_its_own_and_none_the_benchmarks(self):
        self.assertEqual(report.markers(), ("<!-- text-encoder:begin -->", "<!-- text-encoder:end -->"))
        self.assertEqual(report.markers("hidden"), ("<!-- text-encoder-hidden:begin -->", "<!-- text-encoder-hidden:end -->"))
        a = bench.parse_args(["--section", "hidden", "--title", "Hidden states"])
        self.assertEqual((a.section, a.title), ("hidden", "Hidden states"))
        self.assertEqual((bench.parse_args([]).section, bench.parse_args([]).title), ("", report.TITLE))


if __name__ == "__main__":
    unittest.main()
