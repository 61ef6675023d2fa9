"""Tests of gcide.py on a small dictionary in GCIDE's dictd layout (no Debian package needed):

    .venv/bin/python -m unittest examples/minilm/test_gcide.py
"""
import gzip
import os
import tempfile
import unittest

from distill_tools.minilm import gcide, prepare_text

DICTIONARY = """\
Abandon \\A*ban"don\\ ([.a]*b[a^]n"d[u^]n), v. t. [imp. & p. p.
   {Abandoned} (-d[u^]nd); p. pr. & vb. n. {Abandoning}.] [OF.
   abandoner.]
   1. To cast or drive out; to banish; to expel; to reject.
      [Obs.]
      [1913 Webster]

            That he might . . . abandon them from him. --Udall.
      [1913 Webster]

   2. To give up absolutely; to forsake entirely.
      [1913 Webster]

   Syn: To give up; yield; forego; cede.

Abandon \\A*ban"don\\, n.
   The trait of lacking restraint or control; freedom from inhibition.
   [WordNet 1.5]

Abbey \\Ab"bey\\, n.
   A monastery or society of persons of either sex, secluded
   from the world.
   [1913 Webster]

   Note: The abbey church often survives the abbey itself.
         [1913 Webster]

Abbot \\Ab"bot\\, n.
   The superior of an abbey of monks.
   [1913 Webster]
"""


class GcideTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "gcide.dict.dz")
        with gzip.open(self.path, "wt", encoding="utf-8") as f:
            f.write(DICTIONARY)

    def tearDown(self):
        self.dir.cleanup()

    def test_definitions_quotations_and_notes_without_markup_or_wordnet(self):
        self.assertEqual(
            gcide.sentences(set(), set(), self.path),
            [
                "To cast or drive out; to banish; to expel; to reject.",
                "That he might . . . abandon them from him.",
                "To give up absolutely; to forsake entirely.",
                "A monastery or society of persons of either sex, secluded from the world.",
                "The abbey church often survives the abbey itself.",
                "The superior of an abbey of monks.",
            ],
        )

    def test_held_out_words_and_sentences_are_left_out(self):
        kept = gcide.sentences({"abandon"}, {"the superior of an abbey of monks."}, self.path)
        self.assertEqual(
            kept,
            [
                "A monastery or society of persons of either sex, secluded from the world.",
                "The abbey church often survives the abbey itself.",
            ],
        )

    def test_headwords_are_wordnet_lemmas(self):
        heads = [gcide.headword(e) for e in gcide.entries(self.path)]
        self.assertEqual(heads, ["abandon", "abandon", "abbey", "abbot"])


class WordNetLemmasTest(unittest.TestCase):
    def test_lemmas_of_a_data_line_match_gcide_headwords(self):
        line = "00005205 00 a 02 absolute(a) 0 living_thing 1 002 + 05200169 n 0101 | perfect or complete"
        self.assertEqual(prepare_text.synset_words(line), ["absolute", "living_thing"])
        # 0x0b = 11 words
        line = "01 02 n 0b " + " ".join(f"w{i} 0" for i in range(11)) + " 000 | x"
        self.assertEqual(len(prepare_text.synset_words(line)), 11)


if __name__ == "__main__":
    unittest.main()
