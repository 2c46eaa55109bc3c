"""spaCy's NER and tagger over only the parts of texts that could hold a name, with the context the model reads.

Most of the `general` policy's time is spaCy's NER + tagger pass (`docs/detection.md`, "Detection speed per
core"), and much of what it reads cannot hold a name: templated dialog lines ("SYS: What is your order number?"),
sentences of clinic notes with no capitalised word but their first ("He reports heartburn for 3 days."). The
`SegmentTagger` cuts each text into segments (its lines, and a line's sentences), asks a predicate which segments
may hold a name, and runs the model on windows: the runs of such segments with as many tokens of the text on
either side as the model's token vectors read. The tags and entities of a window's inner tokens are copied onto a
Doc of the whole text; every other token gets no tag and no entity, which is what the rules of `names.py` read from
the model in a segment without a name.

Why the context: the token vectors of `en_core_web_sm` are CNNs over four tokens on either side (tok2vec: depth 4,
window 1), so every token inside a window gets the vector, hence the tag, it gets in the whole text. NER decides
token by token from that vector and the first token of the entity it has open, so it decides as in the whole text
unless an entity of the whole text runs into the window from the left context. `tests/test_names_segments.py`
checks the tags and the spans against those of the whole-text pass on a mixed sample. A pipeline whose reach is
not known from its config (a transformer, another encoder) reads whole texts. Distinct windows of a call run
once, and a window that does not tokenize as the same tokens of the whole text is replaced by the whole text.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import numpy as np

from sdp_core.detectors.spacy_tiers import one_blas_thread

if TYPE_CHECKING:
    from spacy.language import Language
    from spacy.tokens import Doc

# A segment ends after a line break (with the blank lines and indentation after it), or after a sentence where a
# capital follows, unless its last word may be an abbreviation or an initial (`Dr.`, `St.`, `J.`, `e.g.`: four
# characters or fewer, unless all lower case or digits).
SEGMENT_END = re.compile(r"\n[ \t\n]*|(?:(?<=\s)|^)(?:\S{5,}|[a-z0-9%]+)[.?!] +(?=[A-Z])", re.M)
# Architectures of a pipeline's NER and tagger whose output for a token depends on no other token, and the window
# encoders, whose reach is depth × window size tokens on either side.
CONTEXT_FREE = ("spacy.Tok2Vec.", "spacy.MultiHashEmbed.", "spacy.Tok2VecListener.", "spacy.TransitionBasedParser.",
                "spacy.Tagger.")
WINDOW_ENCODERS = ("spacy.MaxoutWindowEncoder.", "spacy.MishWindowEncoder.")


def segments(text: str) -> list[tuple[int, int]]:
    """The (start, end) offsets of `text`'s segments: they tile it."""
    bounds = [0, *(m.end() for m in SEGMENT_END.finditer(text) if 0 < m.end() < len(text)), len(text)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def reach(config: object) -> int | None:
    """How many tokens on either side a component config's output for a token depends on; None when unknown."""
    if not isinstance(config, dict):
        return 0
    arch, out = config.get("@architectures", ""), 0
    if arch.startswith(WINDOW_ENCODERS):
        out = config["depth"] * config["window_size"]
    elif arch and not arch.startswith(CONTEXT_FREE):
        return None
    for value in config.values():
        inner = reach(value)
        if inner is None:
            return None
        out = max(out, inner)
    return out


class SegmentTagger:
    """Docs of whole texts annotated by `nlp` (with `disable`d components) where `may_hold_name(segment,
    starts_line)` says a segment may hold a name (`starts_line`: only whitespace before it on its line); `pos_of`
    maps the tagger's tags to parts of speech (`spacy_tiers.tag_pos`)."""

    def __init__(self, nlp: "Language", disable: list[str], pos_of: dict[int, int],
                 may_hold_name: Callable[[str, bool], bool], batch_size: int):
        from spacy.attrs import ENT_IOB, ENT_TYPE, ORTH, POS, TAG

        self.nlp, self.disable, self.pos_of, self.batch_size = nlp, disable, pos_of, batch_size
        self.may_hold_name = may_hold_name
        self.attrs = [ORTH, TAG, POS, ENT_IOB, ENT_TYPE]
        reaches = [reach(dict(nlp.config["components"][name])) for name in nlp.pipe_names if name not in disable]
        known = [r for r in reaches if r is not None]
        self.context = max(known, default=0) if len(known) == len(reaches) else None

    def _windows(self, doc: "Doc", text: str) -> list[tuple[int, int, int, int]]:
        """(window start, inner start, inner end, window end) token indices of the runs of segments that may hold
        a name, each with the pipeline's reach of context on either side; windows that would overlap are merged.
        `text` is `doc.text`, which spaCy joins anew from the tokens at every read."""
        if self.context is None:
            return [(0, 0, len(doc), len(doc))]
        context, starts = self.context, doc.to_array("IDX")
        out: list[tuple[int, int, int, int]] = []
        for a, b in segments(text):
            if not self.may_hold_name(text[a:b], not text[text.rfind("\n", 0, a) + 1:a].strip()):
                continue
            first, last = int(np.searchsorted(starts, a)), int(np.searchsorted(starts, b))
            if first == last:
                continue
            if out and out[-1][3] >= first - context:
                first = out.pop()[1]
            out.append((max(0, first - context), first, last, min(len(doc), last + context)))
        return out

    def _annotations(self, doc: "Doc") -> np.ndarray:
        array = doc.to_array(self.attrs)
        array[:, 2] = [self.pos_of.get(tag, 0) for tag in array[:, 1]]
        return array

    def _run(self, texts: list[str]) -> dict[str, np.ndarray]:
        """The annotations of each distinct text (templated lines repeat: each window runs once)."""
        distinct = list(dict.fromkeys(texts))
        with one_blas_thread():
            docs = self.nlp.pipe(distinct, disable=self.disable, batch_size=self.batch_size)
            return {text: self._annotations(doc) for text, doc in zip(distinct, docs)}

    def docs(self, texts: Sequence[str]) -> Iterator["Doc"]:
        """One annotated Doc per text, in order."""
        docs = [self.nlp.make_doc(text) for text in texts]
        plans = []
        for text, doc in zip(texts, docs):
            windows = self._windows(doc, text)
            ends = [doc[b].idx if b < len(doc) else len(text) for *_, b in windows]
            plans.append([(text[doc[w[0]].idx:end], *w) for w, end in zip(windows, ends)])
        annotations = self._run([window for plan in plans for window, *_ in plan])
        for text, doc, plan in zip(texts, docs, plans):
            array = doc.to_array(self.attrs)
            array[:, 1:] = 0
            array[:, 3] = 2  # outside any entity
            for window, a, i, j, b in plan:
                annotated = annotations[window]
                if len(annotated) != b - a or (annotated[:, 0] != array[a:b, 0]).any():
                    # a tokenizer rule across the window's edge: annotate the whole text
                    array = self._run([text])[text]
                    break
                # an entity across an inner edge is copied whole (IOB 1 is "inside", 3 "begins")
                while i > a and annotated[i - a, 3] == 1:
                    i -= 1
                while j < b and annotated[j - a, 3] == 1:
                    j += 1
                array[i:j] = annotated[i - a: j - a]
            yield doc.from_array(self.attrs[1:], array[:, 1:])
