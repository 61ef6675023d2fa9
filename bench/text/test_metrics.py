"""Hand-computed checks of the benchmark's measures (metrics.py).

    .venv/bin/python -m unittest bench/text/test_metrics.py
"""
import unittest

import numpy as np

from distill_tools.text_bench import metrics


class Ranks(unittest.TestCase):
    def test_ties_share_their_mean_rank(self):
        # sorted: 1 (rank 1), 2 2 (ranks 2, 3 -> 2.5), 5 (rank 4)
        np.testing.assert_array_equal(metrics.average_ranks(np.array([5, 2, 1, 2])), [4, 2.5, 1, 2.5])

    def test_spearman_of_a_monotone_map_is_one(self):
        x = np.array([0.1, 0.9, 0.3, 0.5])
        self.assertAlmostEqual(metrics.spearman(x, np.exp(x)), 1.0, places=12)
        self.assertAlmostEqual(metrics.spearman(x, -x), -1.0, places=12)

    def test_spearman_by_hand(self):
        # ranks a = [1, 2, 3, 4, 5], b = [2, 1, 4, 3, 5]: sum d^2 = 4, rho = 1 - 6*4 / (5*24) = 0.8
        a = np.array([10.0, 20, 30, 40, 50])
        b = np.array([2.0, 1, 4, 3, 5])
        self.assertAlmostEqual(metrics.spearman(a, b), 0.8, places=12)

    def test_spearman_with_ties_by_hand(self):
        # ranks a = [1, 2.5, 2.5, 4], b = [1, 2, 3, 4]: centred a = [-1.5, 0, 0, 1.5],
        # b = [-1.5, -0.5, 0.5, 1.5]; rho = 4.5 / sqrt(4.5 * 5) = 0.9486832980505138
        rho = metrics.spearman(np.array([1.0, 2, 2, 3]), np.array([1.0, 2, 3, 4]))
        self.assertAlmostEqual(rho, 4.5 / np.sqrt(4.5 * 5), places=12)

    def test_constant_input_is_nan(self):
        self.assertTrue(np.isnan(metrics.spearman(np.ones(3), np.arange(3.0))))


class Pairs(unittest.TestCase):
    def test_distinct_ordered_and_seeded(self):
        p = metrics.random_pairs(50, 1000, seed=3)
        self.assertEqual(p.shape, (1000, 2))
        self.assertTrue((p[:, 0] < p[:, 1]).all() and (p >= 0).all() and (p < 50).all())
        self.assertEqual(len({(i, j) for i, j in p}), 1000)
        np.testing.assert_array_equal(p, metrics.random_pairs(50, 1000, seed=3))
        self.assertFalse(np.array_equal(p, metrics.random_pairs(50, 1000, seed=4)))

    def test_all_pairs_of_a_small_set(self):
        p = metrics.random_pairs(4, 6, seed=0)
        self.assertEqual(sorted(map(tuple, p.tolist())), [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)])
        with self.assertRaises(ValueError):
            metrics.random_pairs(4, 7, seed=0)

    def test_pair_cosines(self):
        e = np.array([[1.0, 0], [0, 2.0], [3.0, 3.0]])
        cos = metrics.pair_cosines(e, np.array([[0, 1], [0, 2], [1, 2]]))
        np.testing.assert_allclose(cos, [0.0, 1 / np.sqrt(2), 1 / np.sqrt(2)], atol=1e-15)


class Retrieval(unittest.TestCase):
    def test_ranks_recall_and_mrr(self):
        candidates = np.array([[1.0, 0], [0, 1.0], [1.0, 1.0]])
        queries = np.array([[1.0, 0.1], [1.0, 0.0], [0.2, 1.0]])
        # query 0 -> gold 0: cos 0.995 with 0, 0.7739 with 2: rank 1
        # query 1 -> gold 1: cos 0 with 1, beaten by 0 (1.0) and 2 (0.707): rank 3
        # query 2 -> gold 2: cos 0.8321 with 2, beaten by 1 (0.9806): rank 2
        ranks = metrics.retrieval_ranks(queries, candidates, np.array([0, 1, 2]))
        np.testing.assert_array_equal(ranks, [1, 3, 2])
        self.assertAlmostEqual(metrics.recall_at_1(ranks), 1 / 3)
        self.assertAlmostEqual(metrics.mean_reciprocal_rank(ranks), (1 + 1 / 3 + 1 / 2) / 3)

    def test_a_tie_with_the_gold_candidate_keeps_rank_one(self):
        ranks = metrics.retrieval_ranks(np.array([[1.0, 0]]), np.array([[2.0, 0], [1.0, 0]]), np.array([1]))
        np.testing.assert_array_equal(ranks, [1])


class Parameters(unittest.TestCase):
    def test_split_by_name(self):
        shapes = {
            "embed.tokens.weight": (100, 8),
            "embed.positions.weight": (16, 8),
            "embed.token_types.weight": (2, 8),
            "embed_norm.weight": (8,),
            "blk1_attn.qkv.weight": (24, 8),
            "head.weight": (12, 8),
            "bert.embeddings.word_embeddings.weight": (100, 8),
            "embeddings.position_embeddings.weight": (16, 8),
            "embeddings.token_type_embeddings.weight": (2, 8),
            "embeddings.LayerNorm.bias": (8,),
            "embed|tokens|weight": (10, 8),
        }
        # embedding: 2 x (800 + 128 + 16) + 80 (the `|` one) = 1,968; the rest 8 + 192 + 96 + 8 = 304
        self.assertEqual(metrics.split_parameters(shapes), (2 * 944 + 80, 304))


if __name__ == "__main__":
    unittest.main()
