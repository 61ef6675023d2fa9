"""scripts/totals.py: the one line of totals that ends scripts/test.

    python3 -m unittest scripts/test_totals.py
"""
import os
import unittest

from distill_tools.scripts import totals

CARGO = """\
   Compiling distill v0.1.0
running 5 tests
test plan::a ... ok
test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 71 filtered out; finished in 13.47s

running 0 tests
test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
test result: FAILED. 10 passed; 2 failed; 3 ignored; 0 measured; 0 filtered out; finished in 1.0s
"""


class Cargo(unittest.TestCase):
    def test_every_result_line_is_summed_and_ignored_tests_are_skipped(self):
        self.assertEqual(totals.cargo(CARGO), (15, 2, 3))

    def test_a_run_that_never_reached_its_tests_did_not_finish(self):
        self.assertIsNone(totals.cargo("error[E0425]: cannot find value `x`\n"))
        line = totals.totals([("cargo", "error: could not compile\n")])
        self.assertEqual(line, "totals: cargo tests: did not finish")


class Unittest(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(totals.unittest("....\n----\nRan 26 tests in 0.3s\n\nOK\n"), (26, 0, 0))

    def test_skips_failures_and_errors(self):
        text = "Ran 10 tests in 1.0s\n\nFAILED (failures=2, errors=1, skipped=3)\n"
        self.assertEqual(totals.unittest(text), (4, 3, 3))
        self.assertEqual(totals.unittest("Ran 3 tests in 0.0s\n\nOK (skipped=1)\n"), (2, 0, 1))


class Line(unittest.TestCase):
    def test_one_line_names_each_suite_in_order_and_what_did_not_run(self):
        web = CARGO + "\n23 passed, 0 failed\n"
        line = totals.totals([("cargo", CARGO), ("python", "Ran 26 tests in 0.3s\n\nOK\n"), ("web", web)])
        self.assertEqual(
            line,
            "totals: cargo tests: 15 passed, 2 failed, 3 skipped; python unittest: 26 passed, 0 failed, 0 skipped; "
            "web cargo tests: 15 passed, 2 failed, 3 skipped; page checks: 23 passed, 0 failed, 0 skipped",
        )
        stopped = totals.totals([("cargo", CARGO), ("python", None), ("web", None)])
        self.assertEqual(
            stopped,
            "totals: cargo tests: 15 passed, 2 failed, 3 skipped; python unittest: not run; web cargo tests: not run; "
            "page checks: not run",
        )
        self.assertNotIn("\n", line)

    def test_files_are_read_by_suite(self):
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "cargo.log")
            with open(log, "w") as f:
                f.write(CARGO)
            from io import StringIO
            from contextlib import redirect_stdout

            out = StringIO()
            with redirect_stdout(out):
                totals.main([f"cargo={log}", f"python={os.path.join(d, 'missing.log')}"])
            self.assertEqual(
                out.getvalue(), "totals: cargo tests: 15 passed, 2 failed, 3 skipped; python unittest: not run\n"
            )


if __name__ == "__main__":
    unittest.main()
