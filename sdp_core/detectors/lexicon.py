"""Word lists the name rules read: given names and surnames of every locale, and the common words of the
languages the text may be in.

- Names: the given names and surnames of every locale of Faker's person provider (MIT licence, a dependency
  already: about 31,000 given names and 29,000 surnames from some 80 locales, Latin, Cyrillic, Greek and other
  scripts), compared without case and accents (`Wisniewski` is `Wiśniewski`), each part of a hyphenated or
  multi-word entry on its own. A seeded fifth of the names (`HELD_OUT`, by a hash of the normalised name) is left
  out of the lexicon: the generated evaluation sets draw their people from all of Faker's names, so a fifth of
  their given names and surnames, and about one name in twenty-five whole, are names the rules have never seen,
  as most names in a user's data will be. What the rules do with an unknown name is therefore measured, not
  assumed.
- Common words: English words of WordNet's index (the lemma index the small English spaCy pipeline ships for its
  lemmatizer) and the stop words spaCy lists for English, German, French, Spanish, Italian, Dutch, Portuguese,
  Polish, Swedish, Turkish and Czech. WordNet's nouns also list people (`anna`, `hugo`, `dalton`) and genera
  (`iva`), so a noun counts as common only where the tagger does not read it as a proper noun, and a name in the
  lexicon counts as a name first.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import pkgutil
import unicodedata
from dataclasses import dataclass, field

HELD_OUT = 0.2  # the share of Faker's names left out of the lexicon
STOP_WORD_LANGUAGES = ("en", "de", "fr", "es", "it", "nl", "pt", "pl", "sv", "tr", "cs")


@functools.lru_cache(maxsize=1 << 16)  # the same words come back in every text
def normalise(word: str) -> str:
    """Case-folded, accents removed: `Wiśniewski` -> `wisniewski` (a name written without its accents matches)."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c)).replace("ł", "l").replace("ø", "o")


def held_out(name: str) -> bool:
    """Whether a normalised name is in the seeded fifth left out of the lexicon."""
    digest = hashlib.blake2b(f"lexicon\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < HELD_OUT


@dataclass(frozen=True)
class NameLexicon:
    given: frozenset[str]
    surnames: frozenset[str]

    def is_given(self, word: str) -> bool:
        return all(normalise(p) in self.given for p in word.split("-") if p)

    def is_surname(self, word: str) -> bool:
        return all(normalise(p) in self.surnames for p in word.replace("'", "-").split("-") if len(p) > 1)

    def knows(self, word: str) -> bool:
        return self.is_given(word) or self.is_surname(word)


def _parts(names) -> set[str]:
    """Each word and hyphen-separated part of a list of names, normalised."""
    out = set()
    for name in names:
        for part in str(name).replace("-", " ").split():
            out.add(normalise(part))
    return out


@functools.lru_cache(maxsize=1)
def name_lexicon() -> NameLexicon:
    """Faker's given names and surnames of every locale, less the held-out fifth; built once per process."""
    import faker.providers.person as person

    given: set = set()
    surnames: set = set()
    for module in pkgutil.iter_modules(person.__path__):
        provider = getattr(importlib.import_module(f"{person.__name__}.{module.name}"), "Provider", None)
        for attr, into in (("first_names", given), ("first_names_male", given), ("first_names_female", given),
                           ("first_names_nonbinary", given), ("last_names", surnames),
                           ("last_names_male", surnames), ("last_names_female", surnames)):
            names = vars(provider).get(attr, ()) if provider else ()
            if isinstance(names, (list, tuple, dict, set, frozenset)):
                into.update(_parts(names))
    keep = lambda words: frozenset(w for w in words if len(w) > 1 and not held_out(w))  # noqa: E731
    return NameLexicon(keep(given), keep(surnames))


@dataclass(frozen=True)
class CommonWords:
    """Lower-case common words: `stop` words are never names, `words` are common whatever the tagger says
    (WordNet's verbs, adjectives and adverbs), `nouns` only where the tagger does not take the word for a proper
    noun (WordNet's nouns hold Anna, Hugo and Dalton beside customer and tracker)."""

    stop: frozenset[str]
    words: frozenset[str]
    nouns: frozenset[str]
    verb_forms: dict[str, list[str]] = field(default_factory=dict)  # irregular verb forms and their lemmas
    verb_suffixes: tuple[tuple[str, str], ...] = ()  # regular: an ending and what replaces it in the lemma

    def __call__(self, word: str, proper_noun: bool = False) -> bool:
        """Whether `word` is common, in any case or in the plural (`Logics`, `Tracker`, `Neue`)."""
        lower = word.casefold()
        forms = (lower, lower[:-1] if lower.endswith("s") else "", lower[:-2] if lower.endswith("es") else "")
        return any(f in self.stop or f in self.words or (not proper_noun and f in self.nouns) for f in forms if f)

    def inflected_verb(self, word: str) -> bool:
        """Whether lower-case `word` is a form of a common verb that the lemma index does not list (`gave`,
        `reached`), by the lemmatizer's irregular forms and suffix rules."""
        lemmas = self.verb_forms.get(word) or [word[:-len(end)] + new for end, new in self.verb_suffixes
                                               if word.endswith(end) and len(word) > len(end)]
        return any(lemma in self.words for lemma in lemmas)


@functools.lru_cache(maxsize=2)
def common_words(model: str) -> CommonWords:
    """WordNet's English lemma index of spaCy pipeline `model` (empty when it has no lemmatizer) and the stop words
    of `STOP_WORD_LANGUAGES`; built once per process."""
    from sdp_core.detectors.spacy_tiers import load_spacy

    nlp = load_spacy(model)
    tables: dict[str, list[str]] = {}
    verb_forms: dict[str, list[str]] = {}
    verb_suffixes: tuple[tuple[str, str], ...] = ()
    if "lemmatizer" in nlp.pipe_names:
        lookups = nlp.get_pipe("lemmatizer").lookups
        index = lookups.get_table("lemma_index", {})
        tables = {nlp.vocab.strings[k] if k in nlp.vocab.strings else str(k): v for k, v in index.items()}
        if lookups.has_table("lemma_exc") and lookups.has_table("lemma_rules"):
            verb_forms = dict(lookups.get_table("lemma_exc").get("verb", {}))
            verb_suffixes = tuple((end, new) for end, new in lookups.get_table("lemma_rules").get("verb", []))
    words = {w for pos, entries in tables.items() if pos != "noun" for w in entries if "_" not in w}
    stop = {w for language in STOP_WORD_LANGUAGES
            for w in importlib.import_module(f"spacy.lang.{language}.stop_words").STOP_WORDS}
    return CommonWords(frozenset(stop), frozenset(words), frozenset(w for w in tables.get("noun", ()) if "_" not in w),
                       verb_forms, verb_suffixes)
