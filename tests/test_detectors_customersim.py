"""The recommended policy on generated CustomerSim dialogs: recall, evaluation, redaction, π_c."""

from __future__ import annotations

import pytest

from sdp_core.data.customersim import generate_customersim
from sdp_core.detectors import evaluate, get_policy, word_offsets
from sdp_core.detectors.registry import CUSTOMERSIM_POLICY
from sdp_core.text.alignment import token_mask
from sdp_core.text.redaction import MASK, redact


@pytest.fixture(scope="module")
def dialogs():
    return generate_customersim(300, seed=7)


@pytest.fixture(scope="module")
def detected(dialogs):
    return get_policy("customersim").detect([r.text for r in dialogs])


def test_customersim_is_the_documented_union():
    assert get_policy("customersim").key == get_policy(CUSTOMERSIM_POLICY).key


def test_recall_on_structured_secrets(dialogs, detected):
    ev = evaluate(dialogs, detected)
    for label in ("phone", "order_number", "tracking_number"):
        lr = ev.per_label[label]
        assert lr.secrets.n > 50
        assert lr.tokens.value >= 0.99 and lr.secrets.value >= 0.99, label
        assert lr.tokens.low <= lr.tokens.value <= lr.tokens.high
    assert ev.per_label["address"].secrets.value >= 0.99
    assert ev.per_label["name"].secrets.value >= 0.95
    assert set(ev.per_label) == {"name", "phone", "order_number", "address", "tracking_number"}


def test_evaluation_counts_are_consistent(dialogs, detected):
    ev = evaluate(dialogs, detected)
    assert ev.tokens == sum(len(word_offsets(r.text)) for r in dialogs)
    assert ev.missing_rate.k == ev.recall.n - ev.recall.k and ev.missing_rate.n == ev.tokens
    assert sum(lr.tokens.n for lr in ev.per_label.values()) == ev.recall.n  # gold spans do not overlap
    assert 0.8 < ev.precision <= 1.0
    nothing = evaluate(dialogs, [[] for _ in dialogs])
    assert nothing.recall.k == 0 and nothing.missing_rate.k == nothing.recall.n
    assert nothing.recall.high < 0.01  # Wilson upper bound for 0/n with n in the thousands


def test_redacted_text_holds_no_gold_secret(dialogs, detected):
    for record, spans in zip(dialogs, detected):
        redacted = redact(record.text, spans)
        assert MASK in redacted
        for secret in record.secrets():
            assert secret not in redacted
        assert redacted.startswith("SYS:")


def test_conservative_policy_flags_a_superset(dialogs, detected):
    subset = dialogs[:80]
    conservative = get_policy("conservative").detect([r.text for r in subset])
    for record, base, cons in zip(subset, detected, conservative):
        offs = word_offsets(record.text)
        b, c = token_mask(offs, base, record.text), token_mask(offs, cons, record.text)
        assert not (b & ~c).any()
    assert evaluate(subset, conservative).recall.value == 1.0
