"""The shared helpers: the BENCHMARKS section writer, the machine line, the eager result line.

    .venv/bin/python -m unittest python/distill_tools/test_helpers.py
"""
import json
import os
import tempfile
import unittest
from unittest import mock

from distill_tools import benchmarks_md, eager_result, machine

START, END = "<!-- x:start -->", "<!-- x:end -->"


class SectionWriter(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "BENCHMARKS.md")

    def tearDown(self):
        self.dir.cleanup()

    def read(self):
        with open(self.path, encoding="utf-8") as f:
            return f.read()

    def test_a_missing_file_starts_as_a_title_and_the_section(self):
        benchmarks_md.write_section(self.path, f"{START}\nnew\n{END}", START, END)
        self.assertEqual(self.read(), f"# Benchmarks\n\n{START}\nnew\n{END}\n")

    def test_only_the_text_between_the_markers_is_replaced(self):
        with open(self.path, "w", encoding="utf-8") as f:
            f.write(f"# Benchmarks\n\nbefore\n\n{START}\nold\n{END}\n\nafter ×\n")
        benchmarks_md.write_section(self.path, f"{START}\nnew\n{END}", START, END)
        self.assertEqual(self.read(), f"# Benchmarks\n\nbefore\n\n{START}\nnew\n{END}\n\nafter ×\n")

    def test_a_file_without_the_markers_gets_the_section_appended(self):
        with open(self.path, "w", encoding="utf-8") as f:
            f.write("# Benchmarks\n\nother\n\n\n")
        benchmarks_md.write_section(self.path, f"{START}\nnew\n{END}", START, END)
        self.assertEqual(self.read(), f"# Benchmarks\n\nother\n\n{START}\nnew\n{END}\n")


CPUINFO = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu avx2 avx512f sse4_2\n\nprocessor\t: 1\n"


class MachineLine(unittest.TestCase):
    def test_names_the_cores_the_model_and_the_bf16_flags(self):
        with mock.patch("builtins.open", mock.mock_open(read_data=CPUINFO)), mock.patch("os.cpu_count", return_value=2):
            self.assertEqual(machine.summary(), "2 cores (AMD EPYC 7B13; avx2, avx512f)")

    def test_without_cpuinfo_the_platform_names_the_cpu_and_no_flags(self):
        with mock.patch("builtins.open", side_effect=OSError), mock.patch("os.cpu_count", return_value=8), \
                mock.patch("platform.processor", return_value=""), mock.patch("platform.machine", return_value="arm64"):
            self.assertEqual(machine.summary(), "8 cores (arm64)")


class EagerResult(unittest.TestCase):
    def fields(self):
        return {k: i for i, k in enumerate(eager_result.KEYS)}

    def test_the_line_holds_the_keys_in_order_and_reads_back(self):
        line = eager_result.eager_result_line(**dict(reversed(list(self.fields().items()))))
        self.assertEqual(list(json.loads(line)), list(eager_result.KEYS))
        self.assertEqual(eager_result.read_eager_result(f"epoch 1\n{line}\n")["wall_seconds"], 21)

    def test_a_missing_or_unknown_key_is_named(self):
        fields = self.fields()
        del fields["device"]
        fields["speed"] = 1
        with self.assertRaises(TypeError) as e:
            eager_result.eager_result_line(**fields)
        self.assertTrue(str(e.exception).startswith("eager result: missing keys ['device'], unknown keys ['speed']; want exactly"))


if __name__ == "__main__":
    unittest.main()
