"""`person_name` reads spaCy only over the segments of a text that may hold a name (`detectors/segments.py`): the
spans must be those of the whole-text pass, the independent reference being spaCy over each whole text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdp_core.data.business import generate_business
from sdp_core.data.clinic import generate_clinic
from sdp_core.data.customersim import generate_customersim
from sdp_core.detectors import names
from sdp_core.detectors.lexicon import common_words, name_lexicon
from sdp_core.detectors.segments import reach, segments
from sdp_core.detectors.spacy_tiers import _disabled, load_spacy, tag_pos

FIXTURES = Path(__file__).parent / "fixtures"
MODEL = "en_core_web_sm"


def _fixture_texts(name: str, k: int) -> list[str]:
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()[:k]
    return [json.loads(line)["text"] for line in lines]


@pytest.fixture(scope="module")
def sample() -> list[str]:
    """Clinic notes, dialogs, business messages, real changelogs and real text of many formats."""
    return ([r.text for r in generate_clinic(25, 7)] + [r.text for r in generate_customersim(25, 7)]
            + [r.text for r in generate_business(25, 7, "dev")] + _fixture_texts("changelog_heldout.jsonl", 50)
            + _fixture_texts("realtext.jsonl", 50))


class WholeTexts:
    """The reference: NER and tagger over each whole text, parts of speech from the same tag table."""

    def __init__(self, model: str):
        self.nlp, self.pos_of = load_spacy(model), tag_pos(model)
        self.disable = _disabled(self.nlp, ["ner", "tagger"], "person_name")

    def docs(self, texts):
        for doc in self.nlp.pipe(texts, disable=self.disable):
            for token in doc:
                token.pos = self.pos_of.get(token.tag, 0)
            yield doc


def test_segments_tile_the_text():
    text = "SYS: Hi.\nUSR: Ann Lee.\n\n  Seen by Dr. Lee on 16/03/2021. He reports pain for 3 days. Plan: rest."
    cuts = segments(text)
    assert "".join(text[a:b] for a, b in cuts) == text
    assert [text[a:b] for a, b in cuts][-3:] == ["Seen by Dr. Lee on 16/03/2021. ", "He reports pain for 3 days. ",
                                                "Plan: rest."]


def test_context_is_the_reach_of_the_models_token_vectors():
    assert names.segment_tagger(MODEL).context == 4  # en_core_web_sm: tok2vec depth 4, window 1
    cnn = {"@architectures": "spacy.Tok2Vec.v2", "embed": {"@architectures": "spacy.MultiHashEmbed.v2"},
           "encode": {"@architectures": "spacy.MaxoutWindowEncoder.v2", "depth": 3, "window_size": 2}}
    assert reach({"model": cnn}) == 6
    assert reach({"model": {"@architectures": "spacy-transformers.TransformerModel.v3"}}) is None


@pytest.mark.parametrize(("segment", "may"), [
    ("SYS: What is your order number?\n", False), ("He reports heartburn for 3 days. ", False),
    ("On examination: BP 151/61, HR 86, SpO2 92 %. ", False), ("USR: Megan Chang.\n", True),
    ("Ann called. ", True), ("  [ gregor herrmann ]\n", True), ("Please call Mr Jones. ", True),
])
def test_which_segments_may_hold_a_name(segment, may):
    assert names.may_hold_name(segment, name_lexicon(), common_words(MODEL)) is may


@pytest.mark.parametrize(("segment", "starts_line", "may"), [
    # forms of common verbs the lemma index does not list are common words; other lower-case words may be names
    ("He gave his BSN 591730582 for the referral. ", False, False), ("She reached the clinic. ", False, False),
    ("thanks to gregor herrmann. ", False, True),
    # no name is read inside an e-mail or web address
    ("Please send the results to smith34@hotmail.com or call 07700 733228. ", False, False),
    ("See https://example.org/herrmann for details. ", False, False), ("Ask herrmann@example.org. ", False, False),
    # a common noun opening a sentence inside a line is read only before a person's act; at a line's start (after
    # a sign-off, say) always
    ("Assessment: type 2 diabetes (E11.9), first diagnosed in 2006. ", False, False),
    ("Assessment: type 2 diabetes (E11.9), first diagnosed in 2006. ", True, True),
    ("Assessment wants a review. ", False, True), ("Follow-up in 3 weeks. ", False, False),
])
def test_which_segments_inside_a_line_may_hold_a_name(segment, starts_line, may):
    assert names.may_hold_name(segment, name_lexicon(), common_words(MODEL), starts_line) is may


def test_forms_of_common_verbs():
    common = common_words(MODEL)
    assert [common.inflected_verb(w) for w in ("gave", "reached", "reviewed", "herrmann", "gregor")] == [
        True, True, True, False, False]


def test_tags_inside_windows_are_the_whole_texts(sample):
    """Four tokens of context give every token inside a window the vector, hence the tag, it has in the whole
    text."""
    tagger, reference = names.segment_tagger(MODEL), WholeTexts(MODEL)
    for doc, whole in zip(tagger.docs(sample), reference.docs(sample)):
        assert [t.text for t in doc] == [t.text for t in whole]
        assert all(t.tag == w.tag for t, w in zip(doc, whole) if t.tag), doc.text


def test_spans_where_segments_are_skipped_are_those_of_the_whole_text_pass(monkeypatch):
    """Texts whose segments the model skips for an address, a verb form or a common noun opening a sentence."""
    texts = ["Mr Ann Lee gave his BSN 591730582 for the referral. Please write to ann.lee34@hotmail.com today. "
             "Assessment: type 2 diabetes, first diagnosed in 2006. Identity checked by Dr. Ravi Patel.",
             "Regards,\nMaria Gonzalez\nThe nurse reached Mrs Bartlett by phone. Follow-up in 3 weeks.",
             "SYS: Could you spell that for me?\nUSR: It is jenny.ortega@example.com, Jenny Ortega."]
    tagger = names.segment_tagger(MODEL)
    docs = [tagger.nlp.make_doc(t) for t in texts]
    assert all(sum(j - i for _, i, j, _ in tagger._windows(d, t)) < len(d) for d, t in zip(docs, texts))
    policy = names.PersonNamePolicy(MODEL)
    segmented = policy.detect(texts)
    monkeypatch.setattr(names, "segment_tagger", WholeTexts)
    assert segmented == policy.detect(texts)
    assert sum(len(s) for s in segmented) >= 5


def test_spans_are_those_of_the_whole_text_pass(sample, monkeypatch):
    policy = names.PersonNamePolicy(MODEL)
    segmented = policy.detect(sample)
    monkeypatch.setattr(names, "segment_tagger", WholeTexts)
    whole = policy.detect(sample)
    assert sum(len(s) for s in whole) > 200  # the sample holds names
    assert [i for i, (a, b) in enumerate(zip(segmented, whole)) if a != b] == []
