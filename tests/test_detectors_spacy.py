"""The four spaCy tiers of JFT on the real small English pipeline (loaded once per process)."""

from __future__ import annotations

import pytest

from sdp_core.config import DetectorConfig
from sdp_core.detectors import TIERS, get_policy, load_spacy, word_offsets
from sdp_core.detectors.spacy_tiers import _disabled
from sdp_core.errors import UserError
from sdp_core.text.alignment import token_mask

TIER_ORDER = ["low_entity", "high_entity", "low_contextual", "high_contextual"]

SENTENCES = [
    "Did you hear Alice is getting divorced?",
    "What are you going to do about the custody of the kids?",
    "Barack Obama visited Paris last week.",
    "I bought three apples at the market.",
    "She gave the dog a bone.",
    "The report was written by the committee.",
    "Microsoft hired 200 engineers in Seattle in March 2021.",
    "My doctor said the results came back negative.",
    "We paid $45 for two tickets to the Super Bowl.",
    "He told me that his sister moved to Canada.",
    "The meeting starts at 10 am on Monday.",
    "They were worried about the loan from the bank.",
    "Please send the documents to John Smith by Friday.",
    "Our daughter plays the violin every evening.",
    "It rained heavily in London yesterday.",
    "Did anyone notice the broken window?",
    "The Amazon river flows through Brazil.",
    "I think my password was stolen last night.",
    "About 30 percent of the staff work from home.",
    "Sarah and Tom adopted a cat named Whiskers.",
    "The court ruled in favour of the tenants.",
    "You should call your mother more often.",
    "The first edition of Hamlet sold for a fortune.",
    "Nobody answered the phone at the clinic.",
    "Google announced a new phone in California.",
    "Her salary increased by 5% this year.",
    "The children built a sandcastle on the beach.",
    "I was diagnosed with diabetes in 2019.",
    "We drove 300 miles to visit our grandparents.",
    "The French president met the German chancellor.",
    "Can you remind me about the appointment tomorrow?",
    "My landlord refuses to return the deposit.",
]


@pytest.fixture(scope="module")
def detections() -> dict[str, list]:
    return {tier: get_policy(tier).detect(SENTENCES) for tier in TIER_ORDER}


def masked_words(text: str, spans) -> set[str]:
    offs = word_offsets(text)
    return {text[a:b] for (a, b), m in zip(offs.tolist(), token_mask(offs, spans, text)) if m}


def words(detections, tier: str, i: int) -> set[str]:
    return masked_words(SENTENCES[i], detections[tier][i])


def test_person_is_masked_from_low_entity_up(detections):
    for tier in TIER_ORDER:
        assert {"Barack", "Obama"} <= words(detections, tier, 2), tier
        assert "Alice" in words(detections, tier, 0), tier


def test_cardinal_only_from_high_entity_up(detections):
    assert "three" not in words(detections, "low_entity", 3)
    for tier in TIER_ORDER[1:]:
        assert "three" in words(detections, tier, 3), tier


def test_pronouns_subjects_objects_from_low_contextual_up(detections):
    for tier in TIER_ORDER[:2]:
        assert not {"She", "dog", "bone"} & words(detections, tier, 4), tier
        assert not {"report", "committee"} & words(detections, tier, 5), tier
    for tier in TIER_ORDER[2:]:
        assert {"She", "dog", "bone"} <= words(detections, tier, 4), tier  # PRON, dative, dobj
        assert {"report", "committee"} <= words(detections, tier, 5), tier  # nsubjpass, pobj
    # JFT Table 1, low contextual: "<PRON> are <PRON> going to do about <OBJ> of the <OBJ>?"
    assert words(detections, "low_contextual", 1) == {"What", "you", "custody", "kids"}


def test_verbs_only_in_high_contextual(detections):
    for tier in TIER_ORDER[:3]:
        assert "gave" not in words(detections, tier, 4), tier
    assert {"gave"} <= words(detections, "high_contextual", 4)
    # AUX is not a verb here (the paper keeps "are", "is", "Did")
    assert not {"are", "Did", "is", "was"} & set().union(*(words(detections, "high_contextual", i) for i in range(6)))


def test_each_tier_contains_the_previous(detections):
    grew = 0
    for lower, higher in zip(TIER_ORDER, TIER_ORDER[1:]):
        for i, text in enumerate(SENTENCES):
            offs = word_offsets(text)
            low = token_mask(offs, detections[lower][i], text)
            high = token_mask(offs, detections[higher][i], text)
            assert not (low & ~high).any(), (lower, higher, i)
            grew += int(high.sum() > low.sum())
    assert grew > len(SENTENCES)  # the tiers differ, not just nest


def test_tier_table_nests():
    for lower, higher in zip(TIER_ORDER, TIER_ORDER[1:]):
        a, b = TIERS[lower], TIERS[higher]
        assert set(a.entities) <= set(b.entities) and set(a.pos) <= set(b.pos)
        assert all(set(v) <= set(b.deps.get(k, ())) for k, v in a.deps.items())
    assert len(TIERS["high_entity"].entities) == 18


def test_entity_tiers_run_ner_only_and_contextual_tiers_skip_ner():
    nlp = load_spacy("en_core_web_sm")
    assert set(_disabled(nlp, ["ner"], "t")) >= {"tok2vec", "tagger", "parser", "lemmatizer"}
    contextual = _disabled(nlp, TIERS["low_contextual"].token_components, "t")
    assert "ner" in contextual and "parser" not in contextual and "tok2vec" not in contextual


def test_speaker_tags_are_never_masked():
    text = "SYS: Please provide your full name.\nUSR: Sure, Betty Sims."
    for tier in ("low_entity", "low_contextual"):
        [spans] = get_policy(tier).detect([text])
        assert not any(s.start in (0, text.index("USR")) for s in spans), tier
        assert "Betty" in masked_words(text, spans)


def test_missing_model_is_a_one_line_user_error():
    with pytest.raises(UserError, match="not installed") as e:
        get_policy("low_entity", DetectorConfig(spacy_model="xx_no_such_model_sm"))
    assert "\n" not in str(e.value)


def test_empty_input():
    assert get_policy("high_contextual").detect([]) == []
    assert get_policy("low_entity").detect([""]) == [[]]


def test_matrix_products_on_numpy_give_blis_annotations():
    """`load_spacy` routes the models' products through numpy's BLAS (`_numpy_matmul`); the reference is the same
    pipeline as spaCy loads it, on thinc's default BLIS: the same tags and entities, token by token."""
    import spacy
    from thinc.api import NumpyOps

    from sdp_core.data.clinic import generate_clinic
    from sdp_core.detectors.spacy_tiers import one_blas_thread, resolve_model

    nlp = load_spacy("en_core_web_sm")
    maxouts = [node for node in nlp.get_pipe("tok2vec").model.walk() if node.name == "maxout"]
    assert maxouts and all(isinstance(n.ops, NumpyOps) and not n.ops.use_blis for n in maxouts)
    reference = spacy.load(resolve_model("en_core_web_sm"), exclude=["parser", "lemmatizer", "attribute_ruler"])
    texts = SENTENCES + [r.text for r in generate_clinic(10, 3)]
    with one_blas_thread():
        docs = list(nlp.pipe(texts, disable=_disabled(nlp, ["ner", "tagger"], "test")))
    for doc, ref in zip(docs, reference.pipe(texts)):
        assert [(t.tag_, t.ent_iob_, t.ent_type_) for t in doc] == [(t.tag_, t.ent_iob_, t.ent_type_) for t in ref]
