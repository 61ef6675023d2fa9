"""Build the text demo's corpus from WordNet 3.0 (Debian `wordnet-base`).

    .venv/bin/python examples/minilm/prepare_text.py DEST_DIR [--max-train N] [--test-synsets N]

Every synset of /usr/share/wordnet/data.{noun,verb,adj,adv} has a gloss: a definition followed by
quoted example sentences ("...; \"an aborting fetus\""). Each definition and example of >= 3 words
is one sentence. Synsets are split at random (seeded): --test-synsets of them are held out, and no
sentence of a held-out synset appears in the training lines. Writes, one sentence per line:
  DEST_DIR/train.txt       training sentences (shuffled, deduplicated; all 152,373, or the
                           first --max-train)
  DEST_DIR/test.txt        held-out sentences (deduplicated)
  DEST_DIR/retrieval.tsv   `example<TAB>definition` for each held-out synset that has both (and a
                           definition no other held-out synset shares): each example should
                           retrieve its own synset's definition among all these definitions.
By default train.txt holds every training sentence: the teacher embeds them in ~6 minutes on 2
CPU cores and one epoch trains in ~13 (measured; see README.md beside this script), so the whole
demo fits in 30 minutes.
"""
import argparse
import os
import random
import re
import sys
from dataclasses import dataclass, field
from typing import List, Set, Tuple

from distill_tools.minilm import gcide

WORDNET_DIR = "/usr/share/wordnet"
PARTS = ("noun", "verb", "adj", "adv")
# All of WordNet's training sentences (152,373): each doubling of the sentences seen adds about
# 0.02 to the student's Spearman (README.md beside this script); distill embeds them with the
# teacher in ~6 minutes on 2 idle cores (length-sorted batches, ~400 sentences/s), and the demo
# stays within 30 minutes. `--max-train N` keeps the first N of the shuffled lines.
DEFAULT_MAX_TRAIN = None
DEFAULT_TEST_SYNSETS = 2000
MIN_WORDS = 3
QUOTED = re.compile(r'"([^"]+)"')


@dataclass
class Synset:
    """One WordNet synset's gloss: its definition and its example sentences (either may be '')."""

    definition: str
    examples: List[str] = field(default_factory=list)
    words: List[str] = field(default_factory=list)

    def sentences(self) -> List[str]:
        return [s for s in [self.definition, *self.examples] if len(s.split()) >= MIN_WORDS]


def parse_gloss(gloss: str) -> Synset:
    """`definition; "example"; "example"` -> Synset. The definition is the text before the first
    quote (itself possibly several senses joined by ';'); the examples are the quoted parts."""
    first = gloss.find('"')
    definition = (gloss if first < 0 else gloss[:first]).strip().rstrip(";").strip()
    examples = [e.strip() for e in QUOTED.findall(gloss[max(first, 0) :]) if e.strip()]
    return Synset(definition, examples)


def synset_words(line: str) -> List[str]:
    """The lemmas of a data-file line `offset lex_filenum ss_type w_cnt word lex_id ...`, w_cnt in
    hex, lower case, without an adjective's syntactic marker (`galore(ip)` -> `galore`)."""
    fields = line.split()
    count = int(fields[3], 16)
    return [re.sub(r"\(.*\)$", "", w).lower() for w in fields[4 : 4 + 2 * count : 2]]


def read_synsets(wordnet_dir: str = WORDNET_DIR) -> List[Synset]:
    """Every synset of the four data files, in file order. Licence header lines (which start with
    spaces) are skipped; the gloss is the text after ' | '."""
    synsets = []
    for part in PARTS:
        path = os.path.join(wordnet_dir, f"data.{part}")
        if not os.path.isfile(path):
            print(f"prepare_text: {path} is missing; install Debian's wordnet-base (scripts/setup)", file=sys.stderr)
            sys.exit(2)
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith(" ") or " | " not in line:
                    continue
                synset = parse_gloss(line.split(" | ", 1)[1])
                synset.words = synset_words(line)
                synsets.append(synset)
    return synsets


def dedupe(lines: List[str]) -> List[str]:
    return list(dict.fromkeys(lines))


def split(
    synsets: List[Synset], test_synsets: int, seed: int
) -> Tuple[List[str], List[str], List[Tuple[str, str]]]:
    """(train lines shuffled, held-out lines, retrieval (example, definition) pairs).
    A sentence that also occurs in a held-out synset is dropped from the training lines."""
    order = list(range(len(synsets)))
    random.Random(seed).shuffle(order)
    held = [synsets[i] for i in order[:test_synsets]]
    test = dedupe([s for syn in held for s in syn.sentences()])
    held_out = set(test)
    train = dedupe([s for i in order[test_synsets:] for s in synsets[i].sentences() if s not in held_out])
    random.Random(seed + 1).shuffle(train)
    definitions = [syn.definition for syn in held]
    shared = {d for d in definitions if definitions.count(d) > 1}
    retrieval = [
        (ex[0], syn.definition)
        for syn in held
        if syn.definition not in shared and len(syn.definition.split()) >= MIN_WORDS
        for ex in [[e for e in syn.examples if len(e.split()) >= MIN_WORDS]]
        if ex
    ]
    return train, test, retrieval


def held_out_words(synsets: List[Synset], test_synsets: int, seed: int) -> Set[str]:
    """The lemmas of the synsets `split` holds out (the same seeded order)."""
    order = list(range(len(synsets)))
    random.Random(seed).shuffle(order)
    return {w for i in order[:test_synsets] for w in synsets[i].words}


def write_lines(path: str, lines: List[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dest")
    p.add_argument("--max-train", type=int, default=DEFAULT_MAX_TRAIN)
    p.add_argument("--test-synsets", type=int, default=DEFAULT_TEST_SYNSETS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--wordnet", default=WORDNET_DIR)
    p.add_argument("--gcide", default=gcide.GCIDE_PATH)
    p.add_argument("--no-large", action="store_true", help="do not write train-large.txt")
    a = p.parse_args()
    synsets = read_synsets(a.wordnet)
    train, test, retrieval = split(synsets, a.test_synsets, a.seed)
    print(f"{len(synsets)} synsets, {a.test_synsets} held out; {len(train)} training sentences available")
    os.makedirs(a.dest, exist_ok=True)
    if not a.no_large:
        try:
            extra = gcide.sentences(held_out_words(synsets, a.test_synsets, a.seed), set(test), a.gcide)
        except FileNotFoundError as e:
            print(f"prepare_text: {e}", file=sys.stderr)
            sys.exit(2)
        in_wordnet = set(train)
        large = train + [s for s in extra if s not in in_wordnet]
        random.Random(a.seed + 2).shuffle(large)
        write_lines(os.path.join(a.dest, "train-large.txt"), large)
        print(f"wrote {len(large)} sentences to train-large.txt ({len(large) - len(train)} of them from GCIDE)")
    train = train[: a.max_train] if a.max_train else train
    write_lines(os.path.join(a.dest, "train.txt"), train)
    write_lines(os.path.join(a.dest, "test.txt"), test)
    write_lines(os.path.join(a.dest, "retrieval.tsv"), [f"{e}\t{d}" for e, d in retrieval])
    print(f"wrote {len(train)} train, {len(test)} test sentences and {len(retrieval)} retrieval pairs to {a.dest}")


if __name__ == "__main__":
    main()
