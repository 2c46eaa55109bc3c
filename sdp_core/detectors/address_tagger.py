"""Postal addresses in running text found by a learned tagger (`address_tagger`): a linear-chain CRF (Lafferty,
McCallum and Pereira 2001, "Conditional Random Fields: Probabilistic Models for Segmenting and Labeling Sequence
Data") over the tokens of each line that holds a digit, with BIO labels, trained by L-BFGS in CRFsuite
(`python-crfsuite`, MIT), as `usaddress` trains its address parser.

Why learned: the address regexes of `identifier` are written shape by shape, and every shape they were not written
for is missed; the tagger reads what addresses of every country share (a number beside capitalised words, a street
word of some language, a postcode-like token after a comma, the places after it) from Faker addresses of 52 address
formats in carriers of several languages, and learns from negatives of the same token shapes (dates, times, amounts,
order, invoice and version numbers, phone numbers) what is no address.

The model (`address_tagger.crfsuite` beside this module) is built by `python -m benchmarks.train_address_tagger`,
deterministically (fixed seeds, L-BFGS); the model file's digest is part of the policy's version, so a new model
refreshes the detection cache. Only lines with a digit are read: an address line without one (a place alone on
the line after its street) is not found.
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path
from typing import Sequence

import pycrfsuite

from sdp_core.data.records import Span
from sdp_core.detectors.base import Policy, normalise_spans, version_hash
from sdp_core.detectors.regex import IDENTIFIER_CLEAR, STREET_WORDS

ADDRESS_TAGGER_CODE_VERSION = "3"  # bump when the features or the reading of the labels change
_CLEAR = tuple(re.compile(p) for p in IDENTIFIER_CLEAR)
MODEL_PATH = Path(__file__).with_name("address_tagger.crfsuite")
LABEL = "address"

TOKEN = re.compile(r"\w+|[^\w\s]")
_HAS_DIGIT = re.compile(r"\d")
_YEAR = re.compile(r"(?:19|20)\d\d")
_STREET = frozenset(w.rstrip(".") for w in STREET_WORDS)
_MONTHS = frozenset(
    "jan january feb february mar march apr april may jun june jul july aug august sep sept september oct october nov "
    "november dec december janvier février fevrier mars avril mai juin juillet août aout septembre octobre novembre "
    "décembre decembre enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre "
    "gennaio febbraio aprile maggio giugno luglio settembre ottobre dicembre januar februar märz juni juli oktober "
    "dezember".split()
)
OFFSETS = (-1, -2, 1, 2)  # the neighbours whose features a token sees


def _shape(token: str) -> str:
    """`Xxxxx` -> `Xx`, `12345` -> `d`, `AB12` -> `Xd`: the classes of a token's characters, runs collapsed."""
    out: list[str] = []
    for c in token:
        k = "d" if c.isdigit() else "X" if c.isupper() else "x" if c.isalpha() else c
        if not out or out[-1] != k:
            out.append(k)
    return "".join(out)


@functools.lru_cache(maxsize=65536)
def token_features(token: str) -> tuple[str, ...]:
    """What a token says by itself: its lower-cased form, shape, affixes, digit count, street word or month."""
    low = token.lower()
    feats = [f"w={low}" if len(low) <= 24 else "w=<long>", f"sh={_shape(token)}"]
    if token[0].isdigit():
        digits = sum(c.isdigit() for c in token)
        feats.append(f"nd={digits}" if digits <= 8 else "nd=9+")
        if _YEAR.fullmatch(token):
            feats.append("year")
    elif token[0].isalpha():
        feats += [f"p3={low[:3]}", f"s3={low[-3:]}", f"s4={low[-4:]}", f"len={min(len(token), 8)}"]
        if token[0].isupper():
            feats.append("cap")
        if not token.isascii():
            feats.append("nonascii")
    if low in _STREET:
        feats.append("street")
    if low in _MONTHS:
        feats.append("month")
    return tuple(feats)


_NEIGHBOUR_KEYS = ("w=", "sh=", "nd=", "year", "street", "cap", "month")


@functools.lru_cache(maxsize=65536)
def _features_seen(token: str) -> tuple[tuple[str, ...], ...]:
    """A token's own features (after `bias`), then what it shows a neighbour at each of `OFFSETS` (a subset of its
    features, prefixed by the offset: `-1w=street`): one cached call per token and not one per offset."""
    shown = tuple(f for f in token_features(token) if f.startswith(_NEIGHBOUR_KEYS))
    return ("bias", *token_features(token)), *(tuple(f"{k:+d}{f}" for f in shown) for k in OFFSETS)


def sequence_features(tokens: Sequence[str]) -> list[tuple[str, ...]]:
    """Per token: its own features, `BOL` and `EOL` where the line has no neighbour on that side, and those of its
    neighbours at `OFFSETS`, in that order (the order the model was trained on; CRFsuite adds the weights in it).
    Cached tuples, one call per token, joined by one tuple display per token: 0.10 ms a clinic note (0.17 with a
    call per token and offset, 0.34 adding tuples up)."""
    seen = [_features_seen(t) for t in tokens]
    own = [s[0] for s in seen]
    if own:
        own[0] += ("BOL",)
        own[-1] += ("EOL",)
    # token i sees token i + k as that token shows itself at offset k (`OFFSETS` = -1, -2, 1, 2); () past the ends
    left1, left2 = [(), *(s[1] for s in seen[:-1])], [(), (), *(s[2] for s in seen[:-2])]
    right1, right2 = [*(s[3] for s in seen[1:]), ()], [*(s[4] for s in seen[2:]), (), ()]
    return [(*o, *a, *b, *c, *d) for o, a, b, c, d in zip(own, left1, left2, right1, right2)]


def tokenize(line: str) -> list[tuple[int, int]]:
    """Token offsets of a line: runs of word characters, and every other non-space character alone."""
    return [m.span() for m in TOKEN.finditer(line)]


def candidate_lines(text: str) -> list[tuple[int, str]]:
    """(offset, line) of each line the tagger reads: those with a digit (an address has a number or a postcode)."""
    out, start = [], 0
    for line in text.split("\n"):
        if _HAS_DIGIT.search(line):
            out.append((start, line))
        start += len(line) + 1
    return out


def label_runs(labels: Sequence[str]) -> list[tuple[int, int]]:
    """Token ranges [i, j) of the runs of B and I labels: two addresses with nothing between them are one span."""
    runs: list[tuple[int, int]] = []
    start = -1
    for i, label in enumerate([*labels, "O"]):
        if label == "O" and start >= 0:
            runs.append((start, i))
            start = -1
        elif label != "O" and start < 0:
            start = i
    return runs


def _is_word(token: str) -> bool:
    """A lower-case word of two letters or more that is no street word: the sentence, not the address."""
    return len(token) >= 2 and token.isalpha() and token.islower() and token not in _STREET


def trim(tokens: Sequence[str], i: int, j: int) -> tuple[int, int]:
    """A run without the words of its sentence that the CRF ran on into (an address ends in a number, a place or
    a code, not in "... Vaduz senden" or "... Nicosia (VAT exempt)"), nor punctuation at its end."""
    while j > i:
        last = tokens[j - 1]
        if _is_word(last) or last in {",", ";", ":", "-", "–", "("}:
            j -= 1
        elif last == ")" and "(" in tokens[i:j - 1]:
            k = max(k for k in range(i, j - 1) if tokens[k] == "(")
            if not any(_is_word(t) for t in tokens[k + 1:j - 1]):
                break
            j = k
        else:
            break
    return i, j


@functools.lru_cache(maxsize=4)  # every `get_policy` builds a policy: the 0.5 MB file is read once per process
def model_digest(path: Path = MODEL_PATH) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@functools.lru_cache(maxsize=2)
def crf_tagger(model: str) -> pycrfsuite.Tagger:
    """The CRF of model file `model`, opened once per process (a policy holds no tagger, so it pickles into the
    detection pool's workers)."""
    tagger = pycrfsuite.Tagger()
    tagger.open(model)
    return tagger


def _names_a_place(tokens: Sequence[str]) -> bool:
    """A number and a name: a digit, and a word that is capitalised, of a script without case, or a street word
    (`63 98 83 53` is a phone number, `08/19/52` a date)."""
    return (any(_HAS_DIGIT.search(t) for t in tokens)
            and any(t[0].isalpha() and (not t[0].islower() or t.lower() in _STREET) for t in tokens))



_DIGIT_RUN = re.compile(r"\d+")


def _numbers_cleared(text: str, span: Span, clear: list[tuple[int, int]]) -> bool:
    """Whether `span` holds a number and each of its digit runs lies inside a cleared match."""
    runs = [m.span() for m in _DIGIT_RUN.finditer(text, span.start, span.end)]
    return bool(runs) and all(any(a <= x and y <= b for a, b in clear) for x, y in runs)

class AddressTaggerPolicy(Policy):
    """Addresses the CRF tags in lines holding a digit, trimmed (`trim`); a span must be two tokens or more and
    hold a number and a name (`_names_a_place`)."""

    name = "address_tagger"

    def __init__(self, model: Path | None = None):
        # None: the package's own model, found where each process's copy of the package is (a cluster's workers
        # install it at paths of their own), so the policy pickles without the building machine's path.
        self.model = model
        self.version = version_hash(ADDRESS_TAGGER_CODE_VERSION, model_digest(model or MODEL_PATH), *IDENTIFIER_CLEAR)

    def _tag(self, tokens: list[str]) -> list[str]:
        return crf_tagger(str(self.model or MODEL_PATH)).tag(sequence_features(tokens))

    def _spans(self, text: str) -> list[Span]:
        out: list[Span] = []
        for base, line in candidate_lines(text):
            offsets = tokenize(line)
            tokens = [line[a:b] for a, b in offsets]
            for i, j in label_runs(self._tag(tokens)):
                i, j = trim(tokens, i, j)
                if j - i >= 2 and _names_a_place(tokens[i:j]):
                    out.append(Span(base + offsets[i][0], base + offsets[j - 1][1], LABEL))
        if out:  # a bug reference or a version is no address, as it is no identifier ("PR 25202"), nor is a name
            # whose every number is one ("Weblate 4.8-dev", "Lokalize 1.5")
            clear = [m.span() for pattern in _CLEAR for m in pattern.finditer(text)]
            out = [s for s in out if not any(a <= s.start and s.end <= b for a, b in clear) and not _numbers_cleared(
                text, s, clear)]
        return normalise_spans(out)

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        return [self._spans(t) for t in texts]
