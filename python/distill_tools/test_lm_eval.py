"""The causal-LM measures against a teacher: packed windows and the divergences, on values worked
out by hand.

    .venv/bin/python -m unittest python/distill_tools/test_lm_eval.py
"""
import math
import os
import tempfile
import unittest

import torch

from distill_tools import lm_eval

# p = softmax([0, 0]) = [1/2, 1/2], q = softmax([0, ln 3]) = [1/4, 3/4]:
# KL(p || q) = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3); KL(q || p) = 1/4 ln(1/2) + 3/4 ln(3/2);
# TVD = 1/2 (1/4 + 1/4) = 1/4
FORWARD = 0.5 * math.log(4 / 3)
REVERSE = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)


class Constant(torch.nn.Module):
    """A stand-in decoder: the same two logits at every position of every window."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.tensor(logits)

    def forward(self, ids, mask):
        return self.logits.expand(ids.shape[0], ids.shape[1], 2).clone()


class LastDiffers(torch.nn.Module):
    """The teacher's [0, 0] everywhere but at each window's last position, [0, ln 3] there."""

    def forward(self, ids, mask):
        out = torch.zeros(ids.shape[0], ids.shape[1], 2)
        out[:, -1, 1] = math.log(3)
        return out


class Divergences(unittest.TestCase):
    def test_sums_over_positions_match_the_closed_forms(self):
        t = torch.tensor([[[0.0, 0.0], [1.0, 2.0]]], dtype=torch.float64)
        s = torch.tensor([[[0.0, math.log(3)], [1.0, 2.0]]], dtype=torch.float64)  # the second position agrees: adds 0
        d = lm_eval.divergence_sums(t, s)
        self.assertEqual(d["positions"], 2)
        self.assertAlmostEqual(d["forward_kl"], FORWARD, places=12)  # 0.143841
        self.assertAlmostEqual(d["reverse_kl"], REVERSE, places=12)  # 0.130812
        self.assertAlmostEqual(d["tvd"], 0.25, places=12)

    def test_means_count_every_window_position_but_the_last(self):
        # 3 windows of 4 tokens in batches of 2 (the last batch of 1): 3 x 3 predicting positions,
        # each the pair above; a student that differs from the teacher only at the windows' last
        # positions (which predict nothing) has distance 0, and 5.0 everywhere is the teacher's
        # distribution shifted
        data = torch.zeros(3, 4, dtype=torch.int64)
        students = {"q": Constant([0.0, math.log(3)]), "same": Constant([5.0, 5.0]), "last": LastDiffers()}
        means = lm_eval.mean_divergences(Constant([0.0, 0.0]), students, data, batch=2)
        self.assertAlmostEqual(means["q"]["forward_kl"], FORWARD, places=6)
        self.assertAlmostEqual(means["q"]["reverse_kl"], REVERSE, places=6)
        self.assertAlmostEqual(means["q"]["tvd"], 0.25, places=6)
        for name in ("same", "last"):
            self.assertEqual(means[name], {"forward_kl": 0.0, "reverse_kl": 0.0, "tvd": 0.0})


class FakeTokenizer:
    """Each word is a token: `a` 1, `b` 2, ...; <|endoftext|> 0."""

    class Encoding:
        def __init__(self, ids):
            self.ids = ids

    def token_to_id(self, token):
        return 0 if token == "<|endoftext|>" else None

    def encode(self, text):
        return self.Encoding([ord(w) - ord("a") + 1 for w in text.split()])


class Windows(unittest.TestCase):
    def test_lines_are_closed_by_end_of_text_and_cut_into_whole_windows(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "test.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write("a b c\n\nd e\nf\n")
            # the stream 1 2 3 0 4 5 0 6 0 (9 tokens): two windows of 4, the last token dropped
            w = lm_eval.windows(FakeTokenizer(), path, 4)
        self.assertEqual(w.tolist(), [[1, 2, 3, 0], [4, 5, 0, 6]])


if __name__ == "__main__":
    unittest.main()
