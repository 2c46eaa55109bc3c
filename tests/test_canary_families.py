"""Canary families: every canary of the flagged family is flagged whole by the trial's policy and every canary of
the missed family left whole in the clear, checked by redacting each canary's text with the policy's own spans;
redaction in a prepared trial follows the family; the rank test of inserted against held-out canaries agrees with
pairwise counting and an exact permutation test."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from conftest import small_trial_dict

from sdp_core.attacks.canaries import rank_test
from sdp_core.config import parse_model
from sdp_core.config.trial import TrialConfig
from sdp_core.data.canaries import insert_canaries
from sdp_core.data.customersim import generate_customersim
from sdp_core.detectors import get_policy
from sdp_core.data.records import Span
from sdp_core.errors import UserError
from sdp_core.preparation import prepare_trial_data
from sdp_core.text.redaction import redact

FLAGGED, MISSED = "My number is 415-555-{dddd}", "my ref is #{dddd}"


def _redaction(policy_name: str, texts: list[str], secrets: list[str]) -> list[str]:
    """What redaction with the policy's own spans does to each secret (each canary's text ends with its secret):
    "flagged" when adding the secret's span changes nothing (it is masked whole), "missed" when the redacted text
    still ends with the whole secret, else "cut"."""
    out = []
    for text, secret, spans in zip(texts, secrets, get_policy(policy_name).detect(texts)):
        whole = Span(len(text) - len(secret), len(text))
        clear = redact(text, spans)
        out.append("flagged" if clear == redact(text, [*spans, whole]) else "missed" if clear.endswith(secret)
                   else "cut")
    return out


@pytest.mark.parametrize("policy", ["customersim", "phone"])
def test_each_family_is_what_the_policy_does_to_every_one_of_its_canaries(policy):
    records = generate_customersim(400, 3)
    detect = get_policy(policy).detect
    records, flagged = insert_canaries(records, FLAGGED, 60, 2, seed=3, policy=(policy, detect))
    _, missed = insert_canaries(records, MISSED, 60, 2, seed=3, family="missed", policy=(policy, detect),
                                avoid=frozenset(i.record for i in flagged.insertions))
    assert (flagged.family, missed.family) == ("flagged", "missed")
    for family in (flagged, missed):
        texts = [family.text(k) for k in range(len(family.secrets))]
        assert all(t.endswith(s) for t, s in zip(texts, family.secrets))
        assert _redaction(policy, texts, list(family.secrets)) == [family.family] * len(texts)
    assert not {i.record for i in flagged.insertions} & {i.record for i in missed.insertions}
    assert missed.summary()["judged_by"] == {"policy": policy, "draws": missed.policy["draws"]}


def test_a_format_the_policy_mostly_misses_is_a_missed_family_and_a_missed_format_it_flags_is_refused():
    records = generate_customersim(200, 1)
    detect = get_policy("phone").detect
    _, plain = insert_canaries(records, "My ID is {dddd}", 20, 1, seed=1, policy=("phone", detect))
    assert plain.family == "missed"  # the phone policy has no rule for it: redaction keeps these canaries
    with pytest.raises(UserError, match="misses only 0 of 20 draws"):
        insert_canaries(records, FLAGGED, 20, 1, seed=1, family="missed", policy=("phone", detect))


def test_a_prepared_trial_redacts_the_flagged_family_and_keeps_the_missed_one():
    cfg = parse_model(TrialConfig, small_trial_dict(
        detector={"policy": "phone"},
        data={"canaries": {"format": FLAGGED, "missed_format": MISSED, "count": 10, "repeats": 2}}))
    prepared = prepare_trial_data(cfg)
    flagged, missed = prepared.canaries
    tok = prepared.data.tokenizer
    redacted = "\n".join(tok.decode(ids[ids != tok.pad_token_id]) for ids in prepared.data.train_redacted.input_ids)
    for k, inserted in enumerate(missed.inserted):
        assert (missed.text(k) in redacted) == inserted
    assert not any(flagged.format.render(s) in redacted for s in flagged.secrets)
    assert redacted.count("My number is ") == sum(flagged.inserted) * 2  # each copy there, its number masked
    with pytest.raises(UserError, match="meant|misses only"):
        prepare_trial_data(parse_model(TrialConfig, small_trial_dict(
            detector={"policy": "phone"}, data={"canaries": {"format": FLAGGED, "missed_format": FLAGGED,
                                                             "count": 10, "repeats": 2}})))


def _pairwise_auc(x: list[float], y: list[float]) -> float:
    return float(np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y]))


def test_rank_test_agrees_with_pairwise_counting_and_an_exact_permutation_test():
    members, held_out = [3.1, 0.4, 5.2, 2.2, 7.9], [0.3, 1.9, 0.8, 2.5, 0.1, 1.2]
    result = rank_test(members, held_out)
    assert result is not None
    assert result["auc"] == pytest.approx(_pairwise_auc(members, held_out))
    pooled = members + held_out
    observed = _pairwise_auc(members, held_out)
    splits = list(itertools.combinations(range(len(pooled)), len(members)))
    as_large = sum(_pairwise_auc([pooled[i] for i in c], [pooled[i] for i in range(len(pooled)) if i not in c])
                   >= observed - 1e-12 for c in splits)
    assert result["p_value"] == pytest.approx(as_large / math.comb(len(pooled), len(members)))
    # At most 1 % of six held-out canaries: none above the threshold, so the inserted above the largest (2.5).
    assert result["tpr_at_fpr"] == pytest.approx(3 / 5) and result["fpr_resolution"] == pytest.approx(1 / 6)
    assert rank_test([], held_out) is None


def test_rank_test_with_ties_counts_them_half():
    members, held_out = [1.0, 1.0, 2.0], [1.0, 0.0]
    result = rank_test(members, held_out)
    assert result is not None and result["auc"] == pytest.approx(_pairwise_auc(members, held_out))
    assert result["tpr_at_fpr"] == pytest.approx(1 / 3)
