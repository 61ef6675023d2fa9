"""Sentences from GCIDE (Debian `dict-gcide`), a second corpus for the text benchmark.

GCIDE is Webster's Revised Unabridged Dictionary (1913) with later supplements, in dictd's format
(/usr/share/dictd/gcide.dict.dz, gzip-compatible). An entry starts at column 0 with its headword,
pronunciation, part of speech and etymology; its body is a run of blocks, each closed by a source
tag on a line of its own ("[1913 Webster]", "[PJC]", "[WordNet 1.5]", ...). A block is a
definition ("2. To give up absolutely; to forsake entirely."), a quotation (indented, ending in
"--Author."), a usage note, or a synonym list.

GCIDE also carries WordNet 1.5 glosses, which would leak the text demo's held-out WordNet
sentences into training: every block whose tag names WordNet is dropped, and so is every entry whose
headword is a word of a held-out synset (`exclude_words`), and any sentence equal to a held-out one
(`exclude_sentences`). What is kept: definitions and quotations of 3 to 60 words, markup removed
(`{Abandoned}` -> `Abandoned`, `[Obs.]` and accent codes such as `[=e]` dropped), deduplicated.

Used by prepare_text.py (`--gcide`); the licence is GPL-2.0-or-later (the package's copyright file).
"""
import gzip
import os
import re
from typing import Iterator, List, Set

GCIDE_PATH = "/usr/share/dictd/gcide.dict.dz"
MIN_WORDS = 3
MAX_WORDS = 60
TAG = re.compile(r"^\s*\[([^\]]*)\]\s*$")
HEADWORD = re.compile(r"^([^\s\\][^\\]*?)\s*\\")
NUMBERED = re.compile(r"^\s*(?:\d+\.|\([a-z]\))\s*")
ATTRIBUTION = re.compile(r"\s--\s?[A-Z(].*$")
BRACKETS = re.compile(r"\[[^\]]*\]")
BRACES = re.compile(r"[{}]")
PARENS_LABEL = re.compile(r"^\s*\((?:[A-Z][a-z]*\.?\s*)+\)\s*")
SPACES = re.compile(r"\s+")
PLAIN = re.compile(r"^[A-Za-z0-9 ,;:.'\"!?()\-]+$")


def entries(path: str = GCIDE_PATH) -> Iterator[List[str]]:
    """The dictionary's entries as lists of lines (an entry: a column-0 line with a pronunciation,
    `Headword \\pron\\ ...`, and the indented lines up to the next such line)."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        entry: List[str] = []
        for line in f:
            line = line.rstrip("\n")
            if line and not line[0].isspace() and HEADWORD.match(line):
                if entry:
                    yield entry
                entry = [line]
            elif entry:
                entry.append(line)
        if entry:
            yield entry


def headword(entry: List[str]) -> str:
    """`Abandon \\A*ban"don\\ ...` -> `abandon` (lower case, WordNet's `_` for spaces)."""
    m = HEADWORD.match(entry[0])
    return SPACES.sub("_", m.group(1).strip().lower()) if m else ""


def blocks(entry: List[str]) -> Iterator[tuple]:
    """(source tag, lines) for each block of the entry's body, the header lines dropped: the first
    line and its continuation up to the first blank line or numbered sense, or, for an unnumbered
    entry, up to where the etymology's brackets close."""
    body = entry[1:]
    header_open = entry[0].count("[") - entry[0].count("]")
    start = 0
    while start < len(body) and header_open > 0:
        header_open += body[start].count("[") - body[start].count("]")
        start += 1
    current: List[str] = []
    for line in body[start:]:
        tag = TAG.match(line)
        if tag:
            yield tag.group(1), current
            current = []
        elif line.strip():
            current.append(line)


def clean(text: str) -> str:
    text = BRACKETS.sub(" ", BRACES.sub("", text))
    text = ATTRIBUTION.sub("", SPACES.sub(" ", text).strip())
    text = PARENS_LABEL.sub("", NUMBERED.sub("", text))
    return SPACES.sub(" ", text).strip().strip("-").strip()


def block_sentence(lines: List[str]) -> str:
    """One block as a sentence, or '' for a synonym list, a cross-reference or leftover markup."""
    first = lines[0].strip()
    if first.startswith(("Syn:", "See ", "Usage:")) or not first:
        return ""
    if first.startswith("Note:"):
        lines = [first[len("Note:") :]] + lines[1:]
    text = clean(" ".join(line.strip() for line in lines))
    words = text.split()
    if not (MIN_WORDS <= len(words) <= MAX_WORDS) or not PLAIN.match(text) or not text[0].isupper():
        return ""
    return text


def sentences(exclude_words: Set[str], exclude_sentences: Set[str], path: str = GCIDE_PATH) -> List[str]:
    """GCIDE's definitions and quotations, deduplicated, in dictionary order, without WordNet's
    blocks, the entries of `exclude_words` or the sentences of `exclude_sentences`."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing; install Debian's dict-gcide (scripts/setup)")
    held_lower = {s.lower() for s in exclude_sentences}
    out = {}
    for entry in entries(path):
        if headword(entry) in exclude_words:
            continue
        for tag, lines in blocks(entry):
            if "wordnet" in tag.lower() or not lines:
                continue
            s = block_sentence(lines)
            if s and s.lower() not in held_lower:
                out.setdefault(s, None)
    return list(out)
