"""The sentence-encoder benchmark's measures, in numpy: seeded random sentence pairs, Spearman's
rank correlation, retrieval ranks (recall@1, MRR) and the split of a model's parameters into
embedding tables and the rest. No model code here: `bench.py` embeds, this file scores.
"""
import re

import numpy as np

# Embedding tables (token, position, token type), in the student contract's names
# (`embed.tokens.weight`) and in Hugging Face BertModel's (`embeddings.word_embeddings.weight`),
# under any prefix; TorchScript exports may join names with `|` instead of `.`.
EMBEDDING_TABLE = re.compile(
    r"(^|\.)(embed\.(tokens|positions|token_types)|embeddings\.(word|position|token_type)_embeddings)\.weight$"
)


def random_pairs(n: int, count: int, seed: int) -> np.ndarray:
    """`count` distinct unordered pairs (i, j), i < j < n, drawn uniformly with numpy's
    default_rng(seed): int64 [count, 2] in draw order. ValueError when n has fewer pairs."""
    total = n * (n - 1) // 2
    if count > total:
        raise ValueError(f"{count} pairs asked of {n} sentences, which have only {total}")
    rng = np.random.default_rng(seed)
    pairs = np.empty((0, 2), dtype=np.int64)
    while len(pairs) < count:
        draw = np.sort(rng.integers(0, n, size=(2 * count, 2)), axis=1)
        pairs = np.concatenate([pairs, draw[draw[:, 0] != draw[:, 1]]])
        _, first = np.unique(pairs[:, 0] * n + pairs[:, 1], return_index=True)
        pairs = pairs[np.sort(first)]  # drop repeats, keep the first draw of each pair
    return pairs[:count]


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of the values of a 1-D array, ties sharing the mean of their ranks (as
    scipy.stats.rankdata's default 'average' method): float64 [n]."""
    values, inverse, counts = np.unique(np.asarray(x), return_inverse=True, return_counts=True)
    last = np.cumsum(counts)  # the highest rank of each distinct value
    mean_rank = last - (counts - 1) / 2.0
    return mean_rank[inverse.reshape(-1)].astype(np.float64)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho of two equal-length 1-D arrays: Pearson's correlation of their average
    ranks (Spearman 1904; the tie-corrected form). NaN when either is constant."""
    ra, rb = average_ranks(a), average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / denominator) if denominator > 0 else float("nan")


def pair_cosines(embeddings: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Cosine similarity of each pair's two rows of `embeddings` [n, d]: float64 [len(pairs)]."""
    e = embeddings.astype(np.float64)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    return (e[pairs[:, 0]] * e[pairs[:, 1]]).sum(axis=1)


def retrieval_ranks(queries: np.ndarray, candidates: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Rank (1 = best) of each query's gold candidate by cosine similarity: queries [q, d],
    candidates [c, d], gold int [q] (index into candidates) -> int64 [q]. A candidate scoring
    the same as the gold one does not push it down (rank = 1 + number scoring strictly higher)."""
    norm = lambda m: m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)  # noqa: E731
    scores = norm(queries.astype(np.float64)) @ norm(candidates.astype(np.float64)).T
    own = scores[np.arange(len(gold)), gold]
    return 1 + (scores > own[:, None]).sum(axis=1)


def recall_at_1(ranks: np.ndarray) -> float:
    """Share of queries whose gold candidate ranks first."""
    return float(np.mean(ranks == 1))


def mean_reciprocal_rank(ranks: np.ndarray) -> float:
    """Mean of 1 / rank over the queries (MRR, Voorhees 1999)."""
    return float(np.mean(1.0 / ranks))


def split_parameters(shapes: dict) -> tuple:
    """(embedding, non-embedding) parameter elements of `{name: shape}`: embedding = the token,
    position and token-type tables (EMBEDDING_TABLE), everything else non-embedding."""
    embedding = other = 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) if len(shape) else 1
        if EMBEDDING_TABLE.search(name.replace("|", ".")):
            embedding += n
        else:
            other += n
    return embedding, other
