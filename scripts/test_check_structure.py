"""scripts/check-structure's flow check (`--stages`, `--plumbing`) and its check of where unit tests
live, on tiny crates written to a temporary folder, and on distill/src as the repository has it.

Run: python -m unittest scripts/test_check_structure.py
"""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "check-structure")
STAGES = ["--stages", "early,late", "--plumbing", "util"]


def check(src, *args):
    """(exit status, stdout) of check-structure on `src`."""
    run = subprocess.run([sys.executable, SCRIPT, src, *args], capture_output=True, text=True, timeout=120)
    return run.returncode, run.stdout


class Flow(unittest.TestCase):
    def crate(self, files):
        """A crate at a temporary src/ folder: lib.rs declares the stages and the plumbing; `files`
        maps a path under src/ to its text."""
        root = tempfile.mkdtemp()
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", root]))
        src = os.path.join(root, "src")
        files = {"lib.rs": "pub mod early;\npub mod late;\npub mod util;\n", **files}
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(src, path)), exist_ok=True)
            with open(os.path.join(src, path), "w") as f:
                f.write(text)
        return src

    def test_a_stage_importing_a_later_stage_is_reported(self):
        src = self.crate({
            "early/mod.rs": "pub fn first() -> u32 { crate::late::second() }\n",
            "late/mod.rs": "pub fn second() -> u32 { 2 }\n",
            "util/mod.rs": "pub fn one() -> u32 { 1 }\n",
        })
        status, out = check(src, *STAGES)
        self.assertEqual(status, 1)
        self.assertIn("flow: early uses late, of the later stage late", out)
        self.assertIn("1 findings", out)

    def test_a_stage_importing_an_earlier_stage_and_plumbing_passes(self):
        src = self.crate({
            "early/mod.rs": "pub fn first() -> u32 { crate::util::one() }\n",
            "late/mod.rs": "use crate::early::first;\npub fn second() -> u32 { first() + crate::util::one() }\n",
            "util/mod.rs": "pub fn one() -> u32 { 1 }\n",
        })
        self.assertEqual(check(src, *STAGES), (0, "4 modules, 0 findings\n"))

    def test_plumbing_importing_a_stage_is_reported(self):
        src = self.crate({
            "early/mod.rs": "pub fn first() -> u32 { 1 }\n",
            "late/mod.rs": "pub fn second() -> u32 { 2 }\n",
            "util/mod.rs": "pub mod clock;\n",
            "util/clock.rs": "pub fn tick() -> u32 { crate::early::first() }\n",
        })
        status, out = check(src, *STAGES)
        self.assertEqual(status, 1)
        self.assertIn("plumbing: util::clock uses the stage early", out)
        self.assertIn("1 findings", out)

    def test_a_module_outside_every_stage_is_reported(self):
        src = self.crate({
            "lib.rs": "pub mod early;\npub mod late;\npub mod util;\npub mod stray;\n",
            "early/mod.rs": "",
            "late/mod.rs": "",
            "util/mod.rs": "",
            "stray.rs": "",
        })
        status, out = check(src, *STAGES)
        self.assertEqual(status, 1)
        self.assertIn("unplaced: stray is in no stage (early, late) and no plumbing (util)", out)

    def test_a_test_only_module_may_reach_a_later_stage(self):
        src = self.crate({
            "early/mod.rs": "pub mod first;\n",
            "early/first.rs": 'pub fn first() -> u32 { 1 }\n#[cfg(test)]\n#[path = "first_tests.rs"]\nmod tests;\n',
            "early/first_tests.rs": "#[test]\nfn both() { assert_eq!(crate::late::second(), 2); }\n",
            "late/mod.rs": "pub fn second() -> u32 { crate::early::first::first() + 1 }\n",
            "util/mod.rs": "",
        })
        self.assertEqual(check(src, *STAGES), (0, "6 modules, 0 findings\n"))

    def test_unit_tests_placed_the_one_way_pass(self):
        src = self.crate({
            "early/mod.rs": "pub mod first;\npub mod second;\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n",
            "early/first.rs": 'pub fn first() -> u32 { 1 }\n\n#[cfg(test)]\n#[path = "first_tests.rs"]\nmod tests;\n',
            "early/first_tests.rs": "#[test]\nfn one() { assert_eq!(super::first(), 1); }\n",
            "early/second.rs": "pub fn second() -> u32 { 2 }\n#[cfg(test)]\nmod tests {\n    fn f() { let _ = \"}\"; }\n}\n",
            "late/mod.rs": "",
            "util/mod.rs": "#[cfg(test)]\npub(crate) mod test_rng;\n",
            "util/test_rng.rs": "",
        })
        self.assertEqual(check(src, *STAGES), (0, "8 modules, 0 findings\n"))

    def test_unit_tests_placed_otherwise_are_reported(self):
        src = self.crate({
            "early/mod.rs": "pub mod first;\npub mod second;\npub mod third;\n#[cfg(test)]\nmod first_tests;\n",
            "early/first.rs": "pub fn first() -> u32 { 1 }\n",
            "early/first_tests.rs": "",
            "early/second.rs": "#[cfg(test)]\nmod checks {}\npub fn second() -> u32 { 2 }\n",
            "early/third.rs": "pub fn third() {}\n#[cfg(test)]\nmod tests;\n",
            "early/third/tests.rs": "",
            "late/mod.rs": "",
            "util/mod.rs": "",
        })
        status, out = check(src, *STAGES)
        self.assertEqual(status, 1)
        for line in [
            "tests: early/mod.rs: declares `first_tests` from a mod.rs; a file's tests sit beside it as "
            "<file>_tests.rs, declared by <file>.rs",
            "tests: early/first_tests.rs is not declared by first.rs beside it as "
            '`#[cfg(test)] #[path = "first_tests.rs"] mod tests;`',
            "tests: early/second.rs: the test module `checks` is named `tests` by the one rule",
            "tests: early/second.rs: `mod checks` is not at the foot of the file; move it below the code",
            'tests: early/third.rs: declare its tests as `#[cfg(test)] #[path = "third_tests.rs"] mod tests;`',
            "tests: early/third/tests.rs: name a file's tests <file>_tests.rs, beside <file>.rs, or keep them inline",
        ]:
            self.assertIn(line + "\n", out)
        self.assertIn("6 findings", out)

    def test_distill_flows_one_way(self):
        src = os.path.join(HERE, "..", "distill", "src")
        with open(SCRIPT) as f:
            text = f.read()
        stages = text.split('DISTILL_STAGES = "')[1].split('"')[0]
        plumbing = text.split('DISTILL_PLUMBING = "')[1].split('"')[0]
        self.assertEqual(stages, "config,inputs,student,prune,train,export,report,run")
        status, out = check(src, "--stages", stages, "--plumbing", plumbing)
        self.assertEqual(status, 0, out)
        self.assertTrue(out.endswith(" 0 findings\n"), out)


if __name__ == "__main__":
    unittest.main()
