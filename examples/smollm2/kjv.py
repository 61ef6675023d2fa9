"""The King James Bible from Debian's `bible-kjv-text`, verse by verse (no other package needed).

The package ships the text only in the compressed form that Debian's `bible` program reads,
/usr/lib/bible.data (`dpkg -L bible-kjv-text`). Its layout, read off the file itself:
  - bytes 0x00-0x4f: the magic "EC02Compressed Data File", zero padded;
  - big-endian uint32 at 0x54 (the uncompressed block size, 65536) and 0x58 (the number of
    blocks N), then N + 1 uint32 offsets: block i is the bytes [off[i], off[i + 1]);
  - the Unix `compress` header 1f 9d 90 (LZW, codes of up to 16 bits, block mode) once, just
    before the first block; every block is a separate LZW stream under that header's settings.
Uncompressed (4,404,475 bytes, ASCII), the text is a title line and then one verse per line,
`Ge1:1 In the beginning ...` (book abbreviation, chapter:verse, a space, the verse): 31,102
verses of 66 books. `read_verses` returns them in order, runs of spaces collapsed; `BOOKS` lists
the file's abbreviations in canonical order with the books' names.

Used by prepare_lm.py and make_teacher.py beside this file and by
tests/fixtures/make_lm_fixtures.py. The text is in the public domain (the package's copyright file).
"""
import os
import re
import struct
from dataclasses import dataclass
from typing import Dict, List

KJV_PATH = "/usr/lib/bible.data"
VERSE = re.compile(r"^([1-3]?[A-Z][A-Za-z]*)(\d+):(\d+) (.*)$")
SPACES = re.compile(r"\s+")

_BOOKS = (
    "Ge:Genesis Exo:Exodus Lev:Leviticus Num:Numbers Deu:Deuteronomy Josh:Joshua Jdgs:Judges "
    "Ruth:Ruth 1Sm:1_Samuel 2Sm:2_Samuel 1Ki:1_Kings 2Ki:2_Kings 1Chr:1_Chronicles "
    "2Chr:2_Chronicles Ezra:Ezra Neh:Nehemiah Est:Esther Job:Job Psa:Psalms Prv:Proverbs "
    "Eccl:Ecclesiastes SSol:Song_of_Solomon Isa:Isaiah Jer:Jeremiah Lam:Lamentations Eze:Ezekiel "
    "Dan:Daniel Hos:Hosea Joel:Joel Amos:Amos Obad:Obadiah Jonah:Jonah Mic:Micah Nahum:Nahum "
    "Hab:Habakkuk Zep:Zephaniah Hag:Haggai Zec:Zechariah Mal:Malachi Mat:Matthew Mark:Mark "
    "Luke:Luke John:John Acts:Acts Rom:Romans 1Cor:1_Corinthians 2Cor:2_Corinthians "
    "Gal:Galatians Eph:Ephesians Phi:Philippians Col:Colossians 1Th:1_Thessalonians "
    "2Th:2_Thessalonians 1Tim:1_Timothy 2Tim:2_Timothy Titus:Titus Phmn:Philemon Heb:Hebrews "
    "Jas:James 1Pet:1_Peter 2Pet:2_Peter 1Jn:1_John 2Jn:2_John 3Jn:3_John Jude:Jude Rev:Revelation"
)
BOOKS: Dict[str, str] = {a: n.replace("_", " ") for a, n in (item.split(":") for item in _BOOKS.split())}


@dataclass(frozen=True)
class Verse:
    book: str  # the file's abbreviation, a key of BOOKS
    chapter: int
    verse: int
    text: str


def unlzw(data: bytes, max_bits: int = 16) -> bytes:
    """Decodes one headerless Unix `compress` stream (block mode, codes of 9..max_bits bits,
    least significant bit first; code 256 clears the table). Like compress itself, the reader
    skips to the end of the current group of 8 codes (n_bits bytes) when the code width grows
    and after a clear."""
    out = bytearray()
    table = [bytes([i]) for i in range(256)] + [b""]  # 256: the clear code
    n_bits, max_code, free, top = 9, 511, 257, 1 << max_bits
    pos, start, total = 0, 0, len(data) * 8  # bit positions; `start`: where this width began
    old = None
    while pos + n_bits <= total:
        if free > max_code:
            group = n_bits * 8
            pos = start = start + -(-(pos - start) // group) * group
            n_bits += 1
            max_code = top if n_bits == max_bits else (1 << n_bits) - 1
            continue
        byte = pos >> 3
        code = (int.from_bytes(data[byte : byte + 3], "little") >> (pos & 7)) & ((1 << n_bits) - 1)
        pos += n_bits
        if code == 256:
            group = n_bits * 8
            pos = start = start + -(-(pos - start) // group) * group
            del table[257:]
            n_bits, max_code, free, old = 9, 511, 257, None
            continue
        if old is None:
            entry = table[code]
        elif code < free:
            entry = table[code]
            if free < top:
                table.append(table[old] + entry[:1])
                free += 1
        elif code == free:
            entry = table[old] + table[old][:1]
            if free < top:
                table.append(entry)
                free += 1
        else:
            raise ValueError(f"corrupt LZW stream: code {code} with {free} table entries")
        out += entry
        old = code
    return bytes(out)


def read_text(path: str = KJV_PATH) -> str:
    """The whole uncompressed text of a bible.data file. FileNotFoundError names the package."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing; install Debian's bible-kjv-text (scripts/setup)")
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(b"EC02"):
        raise ValueError(f"{path} does not start with the magic EC02 of bible-kjv-text's data file")
    (blocks,) = struct.unpack(">I", data[0x58:0x5C])
    offsets = struct.unpack(f">{blocks + 1}I", data[0x5C : 0x5C + 4 * (blocks + 1)])
    if data[offsets[0] - 3 : offsets[0] - 1] != b"\x1f\x9d" or offsets[-1] != len(data):
        raise ValueError(f"{path}: unexpected block table (not bible-kjv-text 4.x?)")
    max_bits = data[offsets[0] - 1] & 0x1F
    return b"".join(unlzw(data[a:b], max_bits) for a, b in zip(offsets, offsets[1:])).decode("ascii")


def read_verses(path: str = KJV_PATH) -> List[Verse]:
    """Every verse in canonical order (the title line is skipped). ValueError if a line is
    neither a verse nor the title, or the books differ from BOOKS."""
    verses = []
    lines = read_text(path).split("\n")
    for line in lines[1:]:
        if not line.strip():
            continue
        m = VERSE.match(line)
        if not m or m.group(1) not in BOOKS:
            raise ValueError(f"{path}: not a verse line: {line[:60]!r}")
        verses.append(Verse(m.group(1), int(m.group(2)), int(m.group(3)), SPACES.sub(" ", m.group(4)).strip()))
    if list(dict.fromkeys(v.book for v in verses)) != list(BOOKS):
        raise ValueError(f"{path}: the books are not the 66 of BOOKS in order")
    return verses
