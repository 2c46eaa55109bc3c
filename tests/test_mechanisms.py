"""Each mechanism's defining property, on the real data path (CustomerSim, real detector policies, real Opacus)."""

from __future__ import annotations

import itertools
import math

import dp_accounting
import pytest
import torch
from dp_accounting import pld
from scipy.stats import beta

from sdp_core.config import parse_model
from sdp_core.config.trial import TrialConfig
from sdp_core.detectors import detect_records, get_policy
from sdp_core.errors import UserError
from sdp_core.mechanisms import MECHANISMS
from sdp_core.mechanisms.atdp import rise_reset_multipliers
from sdp_core.mechanisms.crt import line_units
from sdp_core.mechanisms.jft import LightNoiseLedger
from sdp_core.privacy.relations import qualifiers
from sdp_core.tensors import per_record_loss
from sdp_core.text.dedup import duplicate_spans
from sdp_core.text.redaction import MASK
from sdp_core.preparation import prepare_trial_data
from sdp_core.trial import run_trial
from tests.conftest import small_trial_dict


BASE = parse_model(TrialConfig, small_trial_dict())


@pytest.fixture(scope="module")
def trial_data():
    return prepare_trial_data(BASE).data


def _configured(**sections) -> TrialConfig:
    """The test data's config with some sections replaced (the same prepared data fits it)."""
    return parse_model(TrialConfig, {**BASE.model_dump(mode="json"), **sections})


def _with(**mechanism) -> TrialConfig:
    """The test data's config with another mechanism."""
    return _configured(mechanism=mechanism)


def _texts(data, lm) -> list[str]:
    """Decoded rows of a phase's data, as the model sees them (`<mask>` kept, framing removed)."""
    tok = data.tokenizer
    return [tok.decode([i for i in row.tolist() if i not in (tok.pad_token_id, tok.eos_token_id)])
            for row in lm.input_ids]


def test_jft_phase1_holds_no_detected_secret(trial_data):
    plan = MECHANISMS["jft"](trial_data, _with(name="jft"))
    phase1, phase2 = plan.phases
    assert not phase1.private and phase2.private
    policy = get_policy(BASE.detector.policy, BASE.detector)
    texts = _texts(trial_data, phase1.data)
    found = policy.detect([t.replace(MASK, " ") for t in texts])
    assert not any(found), "a phase-1 record still holds a secret the policy detects"
    assert any(MASK in t for t in texts)
    # The mask token never enters the loss.
    mask_id = trial_data.tokenizer.mask_token_id
    assert (phase1.data.weights[phase1.data.input_ids == mask_id] == 0).all()
    assert phase2.data is trial_data.train  # phase 2 sees the original text, under DP


def test_crt_never_mixes_public_and_private_records(trial_data):
    d = trial_data
    plan = MECHANISMS["crt"](d, _with(name="crt"))
    cfg = BASE.detector
    flags = get_policy(f"{cfg.policy},{cfg.conservative_policy}", cfg)
    for phase in plan.phases:
        texts = [t.replace(MASK, " ") for t in _texts(d, phase.data)]
        flagged = [bool(s) for s in flags.detect(texts)]
        has_mask = [MASK in t for t in _texts(d, phase.data)]
        if phase.private:
            assert all(f or m for f, m in zip(flagged, has_mask)), "a DP step would read a public record"
        else:
            assert not any(flagged), "an SGD step would read a private line"
    assert plan.ledger.report()["notion"] == "confidentiality"
    assert all(e["touches"] == "private" for e in plan.ledger.report()["plan"]["events"])


def test_crt_trains_lines_in_their_records_and_public_steps_see_no_private_line(trial_data):
    """The public rows are the records with each private line (flagged by π or π_c, or holding a later copy of a
    sentence: `duplicate_spans` over the lines in order) replaced by one `<mask>`, checked line by line."""
    d = trial_data
    plan = MECHANISMS["crt"](d, _with(name="crt"))
    cfg = BASE.detector
    flags = get_policy(f"{cfg.policy},{cfg.conservative_policy}", cfg)
    lines_in_order = [line for r in d.fetch_records().splits.train for line in r.text.split("\n") if line.strip()]
    repeated = iter([bool(s) for s in duplicate_spans(lines_in_order)])
    expected_public, private_records = [], 0
    for record in d.fetch_records().splits.train:
        lines = record.text.split("\n")
        flagged = [bool(s) for s in flags.detect(lines)]
        private = [bool(line.strip()) and (next(repeated) or f) for line, f in zip(lines, flagged)]
        private_records += any(private)
        if not all(p for p, line in zip(private, lines) if line.strip()):
            expected_public.append("\n".join(MASK if p else line for p, line in zip(private, lines)))
    public = next(ph for ph in plan.phases if not ph.private)
    decoded = [t.replace(" ", "").replace("\n", "") for t in _texts(d, public.data)]
    assert len(public.data) == len(expected_public)  # one row per record: lines keep their context
    assert decoded == [t.replace(" ", "").replace("\n", "") for t in expected_public]
    private_phase = next(ph for ph in plan.phases if ph.private)
    assert len(private_phase.data) == private_records
    assert private_phase.sample_rate == pytest.approx(BASE.training.batch_size / private_records)
    assert plan.details["trained_as"] == "records (lines in context)"


def test_token_budget_shortens_every_phase_alike_and_sigma_follows(trial_data):
    """`training.max_tokens`: the phases' planned tokens (counted here from the rows' loss weights) stay within the
    budget, each phase keeps its share of steps, and the ledger plans exactly the steps that will run. A private
    phase's records count as the trial's neighbours share them: under DP at the held-out validation records' mean
    length, under SDP and confidentiality their unflagged tokens and each run of flagged tokens at the held-out
    records' mean tokens per run."""
    validation = trial_data.validation
    held_out_record = (validation.weights > 0).sum().item() / len(set(validation.record_index.tolist()))

    def counts(data) -> tuple[int, int, int]:  # unflagged positions, runs of flagged ones and their tokens, by row
        unflagged = runs = flagged = 0
        for weights, flags in zip(data.weights.tolist(), data.sensitive.tolist()):
            marks = [bool(f) for w, f in zip(weights, flags) if w > 0]
            unflagged, flagged = unflagged + marks.count(False), flagged + marks.count(True)
            runs += sum(flag for flag, _ in itertools.groupby(marks))
        return unflagged, runs, flagged

    _, held_out_runs, held_out_flagged = counts(validation)

    def shared_tokens(data) -> float:  # unflagged tokens, and each flagged run at the held-out mean tokens per run
        unflagged, runs, _ = counts(data)
        return unflagged + runs * held_out_flagged / held_out_runs

    def tokens(phase, notion):  # a private step draws q·N = min(B, N) records, each with all its rows; a public one B rows
        units = len(set(phase.data.record_index.tolist())) if phase.private else len(phase.data)
        if not phase.private:
            per_unit = (phase.data.weights > 0).sum().item() / len(phase.data)
        else:
            per_unit = held_out_record if notion == "DP" else shared_tokens(phase.data) / units
        return phase.total_steps * min(phase.batch_size, units) * per_unit

    for mechanism in ({"name": "crt"}, {"name": "jft"}, {"name": "jft", "phase1_mode": "light_noise"},
                      {"name": "dpsgd"}, {"name": "redacted"}):
        free = MECHANISMS[mechanism["name"]](
            trial_data, _configured(mechanism=mechanism, training={**BASE.training.model_dump(),
                                                                   "max_steps": None, "epochs": 2}))
        notion = free.ledger.notion
        planned = sum(tokens(ph, notion) for ph in free.phases)
        capped = MECHANISMS[mechanism["name"]](
            trial_data, _configured(mechanism=mechanism, training={**BASE.training.model_dump(),
                                                                   "max_steps": None, "epochs": 2,
                                                                   "max_tokens": int(planned / 3)}))
        assert sum(tokens(ph, notion) for ph in capped.phases) <= planned / 3
        share = int(planned / 3) / planned
        assert [b.total_steps for b in capped.phases] == [max(1, math.floor(a.total_steps * share))
                                                          for a in free.phases]
        planned_steps = {e["phase"]: e["steps"] for e in capped.ledger.to_dict()["plan"]}
        for ph in capped.phases:
            if ph.private:
                assert sum(s for k, s in planned_steps.items() if k.startswith(ph.name)) == ph.total_steps


def _unmasked_secrets(texts, gold, detected) -> int:
    """Gold secrets with a non-space character outside every detected span: redaction leaves part of them."""
    count = 0
    for text, secrets, spans in zip(texts, gold, detected):
        covered = {i for s in spans for i in range(s.start, s.end)}
        count += sum(any(not text[i].isspace() and i not in covered for i in range(s.start, s.end)) for s in secrets)
    return count


def _crt_misses(d, detector=BASE.detector) -> tuple[int, int, int]:
    """(secrets π leaves partly unmasked, secrets π and π_c together leave partly unmasked, secrets), counted on
    the gold spans of CRT's training lines."""
    texts, pi, gold, _ = line_units(d.fetch_records().splits.train, d.fetch_records().train_spans)
    pi_c = detect_records(texts, get_policy(detector.conservative_policy, detector))
    return (_unmasked_secrets(texts, gold, pi), _unmasked_secrets(texts, gold, [a + b for a, b in zip(pi, pi_c)]),
            sum(map(len, gold)))


def _upper_95(k: int, n: int) -> float:
    """One-sided 95 % Clopper–Pearson upper bound of a binomial proportion k/n."""
    return 1.0 if k == n else float(beta.ppf(0.95, k + 1, n - k))


def test_crt_gamma_and_delta2_are_shares_of_secrets_at_their_upper_bounds(trial_data):
    d = trial_data
    plan = MECHANISMS["crt"](d, _with(name="crt"))
    missed, missed_by_both, n = _crt_misses(d)
    assert missed > 0 and missed_by_both == 0  # the test's policy misses names; π_c catches them
    bayes = plan.details["bayesian_confidentiality"]
    assert (bayes["secrets"], bayes["gamma_estimate"], bayes["delta2_estimate"]) == (n, missed / n, 0.0)
    assert (bayes["gamma"], bayes["delta2"]) == pytest.approx((_upper_95(missed, n), 1 - 0.05 ** (1 / n)), rel=1e-9)
    conf = plan.details["confidentiality"]
    assert conf["holds"] is True and conf["epsilon"] == pytest.approx(plan.ledger.report()["plan"]["epsilon"])
    # ε_b and δ_b use the upper bounds (Thm 1.3): log(1 + γ(e^ε − 1)), γδ + δ₂.
    gamma, delta2 = bayes["gamma"], bayes["delta2"]
    assert bayes["epsilon"] == pytest.approx(math.log1p(gamma * math.expm1(conf["epsilon"])))
    assert bayes["delta"] == pytest.approx(gamma * BASE.privacy.delta + delta2)


def test_crt_confidentiality_does_not_hold_when_a_secret_escapes_both_policies(trial_data):
    weak = {**BASE.detector.model_dump(mode="json"), "conservative_policy": "phone"}
    cfg = _configured(mechanism={"name": "crt"}, detector=weak)
    plan = MECHANISMS["crt"](trial_data, cfg)
    missed, missed_by_both, n = _crt_misses(trial_data, cfg.detector)
    assert missed_by_both > 0  # names: neither the test's policy nor a phone-only π_c masks them
    report = plan.ledger.report()
    assert report["epsilon"] == math.inf and report["notion"] == "none"  # a secret trained without noise
    conf = plan.details["confidentiality"]
    assert conf["holds"] is False and 0.995 * 3 <= conf["epsilon"] <= 3  # the noise is calibrated all the same
    assert f"{missed_by_both} gold secret(s) masked by neither" in conf["condition"]
    bayes = plan.details["bayesian_confidentiality"]  # still holds: δ₂ charges the secrets both policies miss
    assert bayes["delta2_estimate"] == missed_by_both / n and bayes["delta2"] == pytest.approx(_upper_95(missed_by_both, n))


def test_jft_light_noise_plans_without_reading_the_records(trial_data):
    """m̃ from gold spans is counted when the data is prepared: a trial whose records are held apart (a sweep's,
    `PreparedData.apart`) plans the same phases and budget without fetching them."""
    from dataclasses import replace

    from sdp_core.detectors.evaluation import evaluate

    records = trial_data.fetch_records()
    assert trial_data.missing_rate == evaluate(records.splits.train, records.train_spans).missing_rate
    cfg = _configured(mechanism={"name": "jft", "phase1_mode": "light_noise"})
    apart = replace(trial_data, records=None)
    with pytest.raises(RuntimeError, match="held apart"):
        apart.fetch_records()
    with_records, without = MECHANISMS["jft"](trial_data, cfg), MECHANISMS["jft"](apart, cfg)
    assert [p.sigmas for p in without.phases] == [p.sigmas for p in with_records.phases]
    assert without.ledger.report() == with_records.ledger.report()


def test_crt_plans_from_its_split_derived_once_without_reading_the_records_again(trial_data):
    """CRT's split of the lines depends on the data and its settings alone: derived once (as a sweep's preparation
    does), it travels with the data (pickled, records held apart), and a trial plans the same phases from it; a
    setting it was not derived for reads the records again."""
    import pickle
    from dataclasses import replace

    cfg = _with(name="crt")
    planned = MECHANISMS["crt"](trial_data, cfg)
    apart = pickle.loads(pickle.dumps(replace(trial_data, records=None)))
    again = MECHANISMS["crt"](apart, cfg)
    assert [(p.name, len(p.data), p.sigmas) for p in again.phases] == [(p.name, len(p.data), p.sigmas)
                                                                      for p in planned.phases]
    assert all(torch.equal(a.data.input_ids, b.data.input_ids) for a, b in zip(again.phases, planned.phases))
    assert again.details == planned.details and again.ledger.report() == planned.ledger.report()
    with pytest.raises(RuntimeError, match="held apart"):
        MECHANISMS["crt"](apart, _with(name="crt", dedup=not cfg.mechanism.dedup))


def test_jft_light_noise_is_an_estimate_beside_its_formal_bound(trial_data):
    pld_accounting = {**BASE.privacy.model_dump(mode="json"), "accountant": "pld"}
    cfg = _configured(mechanism={"name": "jft", "phase1_mode": "light_noise"}, privacy=pld_accounting)
    plan = MECHANISMS["jft"](trial_data, cfg)
    report = plan.ledger.report()["plan"]
    assert report["guarantee"] == "empirical estimate" and 0.995 * 3 <= report["epsilon"] <= 3
    formal = report["formal"]
    assert (formal["notion"], formal["accountant"]) == ("SDP", "pld")
    # Phase 1 at its real sampling rate q (not q·m̃), composed with phase 2, by dp_accounting's PLD.
    relation = {"add_remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE}[formal.get("neighbouring", "add_remove")]
    event = dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(phase.sample_rate, dp_accounting.GaussianDpEvent(phase.sigmas[0])),
            sum(phase.epoch_steps()))
        for phase in plan.phases])
    reference = pld.PLDAccountant(relation, value_discretization_interval=1e-3).compose(event).get_epsilon(1e-5)
    assert formal["epsilon"] == pytest.approx(reference, rel=1e-6)
    assert formal["epsilon"] > report["epsilon"]
    # a console line's ε names the estimate and the formal bound beside it, never the estimate alone
    assert 1 <= reference < 10  # three significant digits are two decimals, rounded up (never below the bound)
    assert qualifiers(report).endswith(f"; empirical estimate, formal bound ε={math.ceil(reference * 100) / 100:.3g}")
    saved = LightNoiseLedger.from_dict(plan.ledger.to_dict())  # a saved ledger keeps the tag and the real rates
    assert saved.report() == plan.ledger.report()


def test_crt_with_no_private_records_is_a_clear_error(trial_data):
    from sdp_core.data.records import Record, Splits
    from sdp_core.preparation import TrialRecords

    lines = ["SYS: hello there.", "USR: hi.", "SYS: how can I help?", "USR: just browsing."]
    plain = TrialRecords(Splits([Record(t) for t in lines], [], []), [[] for _ in range(4)])
    d = type(trial_data)(**{**trial_data.__dict__, "records": plain, "train_records": len(lines),
                            "derivations": {}})  # other records: nothing derived from the fixture's
    with pytest.raises(UserError, match="no private records"):
        MECHANISMS["crt"](d, _with(name="crt"))


def test_atdp_gradient_is_the_weighted_sum_of_token_gradients(trial_data):
    from sdp_core.models.gpt2 import build_gpt2

    plan = MECHANISMS["atdp"](trial_data, _with(name="atdp", w=0.3))
    data = plan.phases[0].data
    w = data.weights[0]
    assert torch.allclose(w[w > 0].unique(), torch.tensor([0.3, 1.0]))
    assert (w[data.sensitive[0] & (w > 0)] == 1.0).all()  # every sensitive token keeps full weight
    torch.manual_seed(0)
    model = build_gpt2("gpt2-tiny", None, len(trial_data.tokenizer), 128, 0.0)
    params = list(model.parameters())
    ids, weights = data.input_ids[:1, :24].long(), data.weights[:1, :24]  # a prefix keeps 24 backward passes cheap
    record_grad = torch.autograd.grad(per_record_loss(model(ids), ids, weights).sum(), params)
    ce = torch.nn.functional.cross_entropy(model(ids)[0, :-1], ids[0, 1:], reduction="none")
    w = weights[0, 1:]
    token_sum = [torch.zeros_like(p) for p in params]
    for t in torch.nonzero(w).flatten():
        for acc, g in zip(token_sum, torch.autograd.grad(ce[t], params, retain_graph=True)):
            acc += w[t] / (w > 0).sum() * g
    for a, b in zip(record_grad, token_sum):
        assert torch.allclose(a, b, atol=1e-6)
    assert any(a.abs().sum() > 0 for a in record_grad)


def test_atdp_sigma_schedule_rises_resets_and_is_what_the_ledger_composes(trial_data):
    m = rise_reset_multipliers(12, escalation=1.3, jitter=0.1, ceiling=2.0, seed=0)
    assert m[0] == 1.0
    for prev, cur in zip(m, m[1:]):
        assert cur == 1.0 or prev * 1.3 * 0.9 - 1e-12 <= cur <= prev * 1.3 * 1.1 + 1e-12
    assert m.count(1.0) >= 2 and max(m) <= 2.0  # at least one reset, never above the ceiling
    cfg = _configured(mechanism={"name": "atdp", "escalation": 1.3, "jitter": 0.1, "ceiling": 2.0},
                      training={**BASE.training.model_dump(mode="json"), "epochs": 6, "max_steps": None})
    plan = MECHANISMS["atdp"](trial_data, cfg)
    phase = plan.phases[-1]
    expected = rise_reset_multipliers(6, 1.3, 0.1, 2.0, cfg.seed)
    sigma0 = phase.sigmas[0]
    assert phase.sigmas == pytest.approx(tuple(sigma0 * x for x in expected))
    assert [e["noise_multiplier"] for e in plan.ledger.report()["plan"]["events"]] == pytest.approx(list(phase.sigmas))


def test_atdp_weight_outside_the_unit_interval_is_rejected(trial_data):
    with pytest.raises(UserError, match=r"outside \(0, 1\]"):
        MECHANISMS["atdp"](trial_data, _with(name="atdp", r_target=0.05))


@pytest.mark.parametrize("mechanism", [
    {"name": "nodp"}, {"name": "redacted"}, {"name": "dpsgd"}, {"name": "jft"},
    {"name": "jft", "phase1_mode": "light_noise"}, {"name": "crt"}, {"name": "atdp", "base": "redacted"}, {"name": "atdp"},
])
def test_every_mechanism_trains_from_a_trial_config_and_writes_its_ledger(mechanism):
    cfg = parse_model(TrialConfig, small_trial_dict(mechanism=mechanism, training={"max_steps": 2}))
    result = run_trial(cfg)
    p = result.privacy
    assert result.state == "finished" and p["complete"]
    expected_notion = {"nodp": "none", "redacted": "SDP", "dpsgd": "DP", "jft": "SDP", "crt": "confidentiality",
                       "atdp": "SDP" if mechanism.get("base") else "DP"}[mechanism["name"]]
    assert p["notion"] == expected_notion == cfg.mechanism.stated_notion()  # what a budget is planned by
    if any(e["noise_multiplier"] > 0 for e in p["events"]):
        assert 0.995 * 3 <= p["epsilon"] <= 3
    if mechanism.get("phase1_mode") == "light_noise":
        light = result.mechanism["light_noise"]
        assert light["guarantee"] == "empirical estimate" and light["at_low"]["epsilon"] <= light["at_high"]["epsilon"]
        assert p["guarantee"] == "empirical estimate" and p["formal"]["epsilon"] >= p["epsilon"]
