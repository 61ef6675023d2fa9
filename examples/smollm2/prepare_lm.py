"""Build the causal-LM demo's corpus from the King James Bible (Debian `bible-kjv-text`).

    .venv/bin/python examples/smollm2/prepare_lm.py DEST_DIR [--max-train-lines N]
        [--passage-words N] [--gcide] [--wordnet] [--seed 0]

Reads the KJV's 31,102 verses with kjv.py. A passage is one chapter's consecutive verses, joined
with spaces until it has at least --passage-words words (40 by default; 0: one verse per
passage) or the chapter ends. Held out, whole: Genesis 1 (make_teacher.py's perplexity check)
and the books of Ruth, Jonah, Titus, Philemon and Jude (`HELD_OUT`, 260 verses). No training
line contains a verse of theirs, and no training line equals a test line. Writes, one passage per
line (UTF-8, no blank line), through temporary files renamed into place:
  DEST_DIR/train.txt   the other passages, shuffled (seed), all of them or the first
                       --max-train-lines
  DEST_DIR/test.txt    the held-out passages in canonical order (Genesis 1 first)
Optionally the training lines also take GCIDE's definitions and quotations (--gcide, Debian
`dict-gcide`, examples/minilm/gcide.py) and WordNet 3.0's glosses (--wordnet, Debian
`wordnet-base`, examples/minilm/prepare_text.py). Webster's 1913 quotes the KJV, so an extra
sentence that shares any run of LEAK_WORDS words with a held-out verse is dropped. Deterministic.
Exit 2 with one line on stderr when a package is missing.
"""
import argparse
import os
import random
import re
import sys
from typing import Iterable, List, Set, Tuple

from distill_tools.smollm2 import kjv

HELD_OUT_CHAPTERS = [("Ge", 1)]
HELD_OUT = ["Ruth", "Jonah", "Titus", "Phmn", "Jude"]
PASSAGE_WORDS = 40
LEAK_WORDS = 8
WORD = re.compile(r"[a-z]+")


def fail(msg: str):
    print(f"prepare_lm: {msg}", file=sys.stderr)
    sys.exit(2)


def held_out(v: kjv.Verse) -> bool:
    return v.book in HELD_OUT or (v.book, v.chapter) in HELD_OUT_CHAPTERS


def passages(verses: Iterable[kjv.Verse], min_words: int) -> List[str]:
    """Consecutive verses of one chapter joined until a passage has >= min_words words."""
    out, current, words, chapter = [], [], 0, None
    for v in verses:
        if current and ((v.book, v.chapter) != chapter or words >= min_words):
            out.append(" ".join(current))
            current, words = [], 0
        chapter = (v.book, v.chapter)
        current.append(v.text)
        words += len(v.text.split())
    if current:
        out.append(" ".join(current))
    return out


def split(verses: List[kjv.Verse], min_words: int = PASSAGE_WORDS, seed: int = 0) -> Tuple[List[str], List[str]]:
    """(training passages shuffled with seed, held-out passages in canonical order). Passages
    never cross a chapter, so none mixes held-out and training verses."""
    test = passages([v for v in verses if held_out(v)], min_words)
    seen = set(test)
    train = [p for p in dict.fromkeys(passages([v for v in verses if not held_out(v)], min_words)) if p not in seen]
    random.Random(seed).shuffle(train)
    return train, test


def ngrams(text: str, n: int) -> Set[Tuple[str, ...]]:
    words = WORD.findall(text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def extra_sentences(test: List[str], use_gcide: bool, use_wordnet: bool) -> Tuple[List[str], int]:
    """GCIDE and/or WordNet sentences (in that order, deduplicated) that share no LEAK_WORDS-word
    run with a test line, and how many were dropped for sharing one."""
    from distill_tools.minilm import gcide, prepare_text

    found: List[str] = []
    try:
        if use_gcide:
            found += gcide.sentences(set(), set())
        if use_wordnet:
            found += [s for syn in prepare_text.read_synsets() for s in syn.sentences()]
    except FileNotFoundError as e:
        fail(str(e))
    held = set().union(*(ngrams(t, LEAK_WORDS) for t in test))
    kept = [s for s in dict.fromkeys(found) if not (ngrams(s, LEAK_WORDS) & held)]
    return kept, len(dict.fromkeys(found)) - len(kept)


def write_lines(path: str, lines: List[str]) -> None:
    """One line each, through path.partial renamed to path."""
    if any(not line.strip() or "\n" in line for line in lines):
        raise ValueError(f"{path}: a blank line or an embedded newline")
    tmp = path + ".partial"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dest")
    p.add_argument("--max-train-lines", type=int, default=None)
    p.add_argument("--passage-words", type=int, default=PASSAGE_WORDS)
    p.add_argument("--gcide", action="store_true", help="add GCIDE's sentences to the training lines")
    p.add_argument("--wordnet", action="store_true", help="add WordNet's glosses to the training lines")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kjv", default=kjv.KJV_PATH)
    a = p.parse_args()
    try:
        verses = kjv.read_verses(a.kjv)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    train, test = split(verses, a.passage_words, a.seed)
    n_held = sum(held_out(v) for v in verses)
    print(f"{len(verses)} KJV verses: {len(verses) - n_held} -> {len(train)} training passages; "
          f"{n_held} held out (Genesis 1, {', '.join(kjv.BOOKS[b] for b in HELD_OUT)}) -> {len(test)} test passages")
    if a.gcide or a.wordnet:
        extra, dropped = extra_sentences(test, a.gcide, a.wordnet)
        train += extra
        random.Random(a.seed + 1).shuffle(train)
        print(f"added {len(extra)} {'GCIDE' if a.gcide else ''}{'+' if a.gcide and a.wordnet else ''}"
              f"{'WordNet' if a.wordnet else ''} sentences to the training lines ({dropped} dropped: they quote a held-out verse)")
    if a.max_train_lines is not None:
        train = train[: a.max_train_lines]
    os.makedirs(a.dest, exist_ok=True)
    write_lines(os.path.join(a.dest, "train.txt"), train)
    write_lines(os.path.join(a.dest, "test.txt"), test)
    words = [sum(len(line.split()) for line in lines) for lines in (train, test)]
    print(f"wrote {len(train)} train lines ({words[0]} words) and {len(test)} test lines ({words[1]} words) to {a.dest}")


if __name__ == "__main__":
    main()
