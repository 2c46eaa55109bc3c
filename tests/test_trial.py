"""One trial end to end, without Ray: result contents, privacy report, secrets kept out of the vocabulary."""

from __future__ import annotations

import json
import math
import pickle

import pytest
import torch

from sdp_core.config import parse_model
from sdp_core.config.trial import TrialConfig
from sdp_core.metrics import evaluation_rows
from sdp_core.privacy import assert_no_bare_epsilon, epsilon_from_ledger
from sdp_core.preparation import data_key, prepare_trial_data
from sdp_core.tensors import LMData
from sdp_core.text.encode import encode
from sdp_core.trial import run_trial
from tests.conftest import run_main, small_trial_dict


@pytest.fixture(scope="module")
def dpsgd_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("trial")
    cfg = parse_model(TrialConfig, small_trial_dict(mechanism={"name": "dpsgd"}))
    return run_trial(cfg, out), out


def test_result_states_epsilon_with_notion_delta_accountant_and_events(dpsgd_result):
    result, out = dpsgd_result
    saved = json.loads((out / "result.json").read_text())
    assert_no_bare_epsilon(saved)
    p = saved["privacy"]
    assert p["notion"] == "DP" and p["accountant"] == "rdp" and p["delta"] == 1e-5
    assert 0.995 * 3.0 <= p["epsilon"] <= 3.0
    assert sum(e["steps"] for e in p["events"]) == saved["metrics"]["private_steps"] == 6
    # 200 records, a third of them two rows at max_length 128: ε is per record, q = B/N over records
    assert saved["detector"]["windows"]["rows"] > 200 and {e["sample_rate"] for e in p["events"]} == {16 / 200}
    assert p["unit"].startswith("a record, whatever its length") and not any("per row" in c for c in p["not_covered"])
    assert epsilon_from_ledger(saved["ledger"])["epsilon"] == pytest.approx(p["epsilon"], rel=1e-9)


def test_result_has_metrics_timings_versions_and_a_reloadable_model(dpsgd_result):
    from sdp_core.models.checkpoint import load_model

    result, out = dpsgd_result
    assert math.isfinite(result.metrics["val_perplexity"]) and result.metrics["val_private_perplexity"]
    assert {"torch", "opacus", "sdp_sweep"} <= set(result.versions)
    assert result.versions["device"] == (torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
    assert result.timings["total"] > 0
    model, tok, meta = load_model(out / "model")
    assert meta["vocab_size"] == len(tok)


def test_trial_reports_its_compute_steps_tokens_and_wall_time(dpsgd_result):
    """Tokens trained on, against a count from the rows themselves: a batch of every row makes each step see all
    the loss positions of the training data."""
    result, _ = dpsgd_result
    assert result.metrics["steps"] == 6 and result.metrics["wall_seconds"] == pytest.approx(result.timings["total"], abs=1e-3)
    cfg = parse_model(TrialConfig, small_trial_dict(mechanism={"name": "nodp"},
                                                    training={"batch_size": 400, "epochs": 2}))
    full = run_trial(cfg)
    data = prepare_trial_data(cfg).data
    assert full.metrics["steps"] == 2
    assert full.metrics["tokens"] == 2 * int((data.train.weights > 0).sum())


def _weights(out) -> torch.Tensor:
    from sdp_core.models.checkpoint import load_model

    return torch.cat([p.detach().flatten() for p in load_model(out / "model")[0].parameters()])


def test_dp_noise_is_secret_while_the_seed_fixes_everything_else(dpsgd_result, tmp_path):
    """The published seed must not regenerate DP noise: the same DP config and seed train different weights, while
    No-DP (no privacy randomness) and the debugging switch `reproducible_noise` repeat exactly."""
    result, out = dpsgd_result
    run_trial(parse_model(TrialConfig, small_trial_dict(mechanism={"name": "dpsgd"})), tmp_path / "again")
    assert not torch.allclose(_weights(out), _weights(tmp_path / "again"))
    assert result.privacy["noise"].startswith("secret")
    for sections in ({"mechanism": {"name": "nodp"}},
                     {"mechanism": {"name": "dpsgd"}, "privacy": {"reproducible_noise": True}}):
        cfg = parse_model(TrialConfig, small_trial_dict(**sections))
        runs = [run_trial(cfg, tmp_path / f"{cfg.mechanism.name}-{i}") for i in range(2)]
        assert torch.equal(_weights(tmp_path / f"{cfg.mechanism.name}-0"), _weights(tmp_path / f"{cfg.mechanism.name}-1"))
    assert "does not hold" in runs[0].privacy["noise"]


def test_a_trial_is_the_same_whether_it_prepared_the_data_or_was_given_the_sweeps(tmp_path):
    """A sweep prepares each data setting once and hands it to its trials, its records apart: that changes nothing
    a trial computes, membership inference included, and a No-DP trial never reads the records (not given back
    here: reading them would fail)."""
    from sdp_core.sweep.prepare import members_kept, prepare_shared

    nodp = lambda seed: parse_model(TrialConfig, small_trial_dict(  # noqa: E731
        seed=seed, mechanism={"name": "nodp"}, evaluation={"mia": True, "max_eval_records": 20}))
    fresh = run_trial(nodp(1), tmp_path / "fresh")
    shared = prepare_shared([nodp(0), nodp(1)])  # one data setting for both seeds
    key = data_key(nodp(1))
    assert list(shared) == [key] and members_kept([nodp(0), nodp(1)], key) == 20
    run_trial(nodp(0), tmp_path / "other", prepared=shared[key])
    every, _ = shared[key].apart(20)
    reused = run_trial(nodp(1), tmp_path / "reused", prepared=every)
    assert reused.timings["tokenize"] == 0.0 < fresh.timings["tokenize"]
    assert torch.equal(_weights(tmp_path / "fresh"), _weights(tmp_path / "reused"))
    untimed = lambda metrics: {k: v for k, v in metrics.items() if not k.endswith("_seconds")}  # noqa: E731
    assert "mia_auc" in fresh.metrics and untimed(reused.metrics) == untimed(fresh.metrics)


def test_what_every_trial_of_a_sweep_reads_holds_no_record_text_past_the_membership_sample():
    """The part of a setting's data every trial of a sweep unpickles (`PreparedData.apart`) does not grow with the
    records' text: of the training records it holds the first `max_eval_records` alone, of the held-out ones none.
    CRT reads every training record: it fails without them, and plans as on the data in hand once they are back."""

    from sdp_core.mechanisms import MECHANISMS

    cfg = parse_model(TrialConfig, small_trial_dict(
        mechanism={"name": "crt"}, detector={"conservative_policy": "phone,order_number,tracking_number,email"}))
    prepared = prepare_trial_data(cfg)
    every, records = prepared.apart(5)
    payload = pickle.dumps(every, protocol=5, buffer_callback=[].append)  # as Ray stores it: the rows' arrays apart
    inside = lambda r: r.text.encode() in payload  # noqa: E731
    train, held_out = records.splits.train, [*records.splits.validation, *records.splits.test]
    assert all(map(inside, train[:5])) and not any(map(inside, [*train[5:], *held_out]))
    buffers: list = []  # the records, as the object store keeps them: arrays, out of band
    stored = pickle.dumps(records, protocol=5, buffer_callback=buffers.append)
    assert pickle.loads(stored, buffers=buffers) == records and not any(r.text.encode() in stored for r in train)
    assert every.data.train_records == len(train) == 200
    with pytest.raises(RuntimeError, match="held apart"):
        MECHANISMS["crt"](every.data, cfg)
    assert MECHANISMS["crt"](every.with_records(records).data, cfg).details == MECHANISMS["crt"](prepared.data, cfg).details


def test_trials_that_differ_only_in_what_preparation_does_not_read_share_their_data():
    """A searched model setting (a LoRA rank, the architecture's size) does not prepare the data again; a data
    setting or a classifier's labels do."""
    key = lambda **sections: data_key(parse_model(TrialConfig, small_trial_dict(**sections)))  # noqa: E731
    assert key() == key(model={"arch": "gpt2", "preset": "gpt2-tiny", "adapter": {"rank": 16}})
    assert key() != key(data={"seed": 7})


def test_tokenizer_vocabulary_holds_no_gold_secret():
    """No vocabulary entry of 4+ characters is a secret, or a word seen only inside secrets."""
    from sdp_core.text.redaction import redact

    cfg = parse_model(TrialConfig, small_trial_dict(data={"n_train": 400}, tokenizer={"vocab_size": 2000}))
    data = prepare_trial_data(cfg).data
    vocab = {t.replace("Ġ", " ").strip() for t in data.tokenizer.get_vocab()}
    records = data.fetch_records().splits.train
    secrets = {s for r in records for s in r.secrets()}
    public_words = {w for r in records for w in redact(r.text, r.spans).split()}
    secret_only = {w.strip(".,") for s in secrets for w in s.split()} - public_words
    leaked = [t for t in vocab if len(t) >= 4 and (t in secrets or t in secret_only)]
    assert secrets and not leaked, f"{len(leaked)} vocabulary entries are secrets"


def test_the_tokenizer_learns_from_the_seeded_sample_of_tokenizer_train_records_and_the_rows_follow_it():
    """With more training records than `tokenizer.train_records`, the BPE is the one trained on exactly the records
    `random.Random(data.seed).sample` draws, their known secrets redacted; with as many, it is the whole data's."""
    import random

    from sdp_core.text.redaction import redact
    from sdp_core.text.tokenizer import train_bpe_tokenizer

    prepare = lambda **tokenizer: prepare_trial_data(parse_model(TrialConfig, small_trial_dict(  # noqa: E731
        data={"seed": 3}, tokenizer={"vocab_size": 400, **tokenizer}))).data
    sampled, whole = prepare(train_records=60), prepare(train_records=200)
    records, spans = whole.fetch_records().splits.train, whole.fetch_records().train_spans
    chosen = sorted(random.Random(3).sample(range(len(records)), 60))
    texts = [redact(records[i].text, sorted({*spans[i], *(records[i].spans or ())})) for i in chosen]
    assert sampled.tokenizer.get_vocab() == train_bpe_tokenizer(texts, 400).get_vocab()
    assert sampled.tokenizer.get_vocab() != whole.tokenizer.get_vocab()
    assert torch.equal(whole.train.input_ids, prepare(train_records=None).train.input_ids)
    assert torch.equal(sampled.validation.input_ids,
                       encode([r.text for r in sampled.fetch_records().splits.validation],
                              [list(r.spans or ()) for r in sampled.fetch_records().splits.validation], sampled.tokenizer,
                              128).input_ids)


@pytest.mark.parametrize("args,problem", [
    (["--set", "privacy.target_epsilon=0"], "privacy.target_epsilon: must be > 0"),
    (["--set", "training.bogus=1"], "--set: training.bogus=1: no setting 'bogus' in training"),
])
def test_bad_trial_config_is_one_line_exit_2(args, problem):
    proc = run_main("trial", *args)
    assert proc.returncode == 2 and problem in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02\x03"])
def test_bad_trial_data_is_one_line_exit_2(tmp_path, content):
    data = tmp_path / "data.jsonl"
    data.write_bytes(content)
    proc = run_main("trial", "--data", str(data), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and str(data) in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_unreachable_epsilon_target_fails_loudly(tmp_path):
    proc = run_main("trial", "--set", "privacy.target_epsilon=1e-4", "--set", "data.n_train=200",
                   "--set", "detector.policy=phone", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "unreachable" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_delta_at_or_above_one_over_n_warns(tmp_path):
    proc = run_main("trial", "--set", "data.n_train=100", "--set", "privacy.delta=0.02", "--set", "detector.policy=phone",
                    "--set", "training.max_steps=1", "--set", "evaluation.exposure=false",
                    "--set", "evaluation.mia=false", "--set", "tokenizer.vocab_size=600", "--out", str(tmp_path / "o"))
    assert proc.returncode == 0
    assert "warning: privacy.delta = 0.02 is not below 1/N = 0.01" in proc.stderr


def test_trials_of_one_sweep_see_the_same_data_and_canaries():
    """Trial seeds vary initialisation and sampling only: the data seed is the sweep's, shared by every trial."""
    from sdp_core.config.sweep import SweepConfig
    from sdp_core.sweep.space import trial_config_dict

    base = small_trial_dict(data={"canaries": {"format": "My ID is {dddddd}", "count": 2, "repeats": 3}})
    sweep = parse_model(SweepConfig, {"name": "s", "seed": 4, "base": base, "mechanisms": ["dpsgd"],
                                      "search_space": {"parameters": {"training.learning_rate":
                                                                      {"type": "loguniform", "low": 1e-4, "high": 1e-2}}}})
    cfgs = [parse_model(TrialConfig, trial_config_dict(sweep, {}, n)) for n in (0, 1)]
    assert cfgs[0].seed != cfgs[1].seed
    (a, plan_a), (b, plan_b) = ((p.data, p.canaries) for p in map(prepare_trial_data, cfgs))
    (ra, rb) = (a.fetch_records().splits, b.fetch_records().splits)
    assert [r.text for r in ra.validation] == [r.text for r in rb.validation]
    assert [r.text for r in ra.train] == [r.text for r in rb.train]
    assert plan_a == plan_b  # same canary values, same places
    assert torch.equal(a.validation.input_ids, b.validation.input_ids)  # one tokenizer, trained once


def test_dp_report_says_the_tokenizer_is_not_covered_unless_it_learns_from_public_text():
    from sdp_core.mechanisms import MECHANISMS
    from sdp_core.trial import not_covered

    for corpus, covered in (("training", False), ("public", True)):
        cfg = parse_model(TrialConfig, small_trial_dict(mechanism={"name": "dpsgd"}, tokenizer={"corpus": corpus}))
        data = prepare_trial_data(cfg).data
        caveats = not_covered(cfg, MECHANISMS["dpsgd"](data, cfg))
        assert any("number of training records" in c for c in caveats)
        assert covered == (not any("tokenizer" in c for c in caveats))
        if corpus == "public":  # learnt from other dialogs: no training secret in its vocabulary
            vocab = {t.replace("Ġ", " ").strip() for t in data.tokenizer.get_vocab()}
            secrets = {s for r in data.fetch_records().splits.train for s in r.secrets() if len(s) >= 4}
            assert not vocab & secrets


def test_long_records_become_windows_and_every_mechanism_samples_and_accounts_records():
    """At 128 tokens about a third of the dialogs need two rows: no token is dropped, every canary copy stays in one
    window, and every mechanism's private phases sample records, with q = B/N over records in the ledger (not over
    rows), so the report has no per-window caveat and states the unit. At the default length a row is a record.
    `refuse` turns a long record into one clear error."""
    from sdp_core.errors import UserError
    from sdp_core.mechanisms import get_mechanism
    from sdp_core.trial import not_covered

    canaries = {"canaries": {"format": "My ID is {dddd}", "count": 20, "repeats": 2}}
    for length, split in ((128, True), (TrialConfig().data.max_length, False)):
        cfg = parse_model(TrialConfig, small_trial_dict(data={"max_length": length, **canaries},
                                                        mechanism={"name": "dpsgd"}))
        prepared = prepare_trial_data(cfg)
        data, (plan,), detector = prepared.data, prepared.canaries, prepared.detector
        windows = detector["windows"]
        assert windows["tokens_dropped"] == 0 and windows["rows"] == len(data.train) and windows["records"] == 200
        assert (windows["windows_per_record_max"] > 1) == split and (windows["records_split"] > 40) == split
        dpsgd = get_mechanism("dpsgd")(data, cfg)
        assert not any("per row" in c for c in not_covered(cfg, dpsgd))
        assert {e.sample_rate for e in dpsgd.ledger.plan} == {16 / 200}  # records, whatever the rows
        tok = data.tokenizer
        rows = [tok.decode(ids[ids != tok.pad_token_id]) for ids in data.train.input_ids]
        for k, inserted in enumerate(plan.inserted):
            assert sum(row.count(plan.text(k)) for row in rows) == (2 if inserted else 0)
        if split:
            _every_mechanism_samples_records(data, canaries)
    refuse = parse_model(TrialConfig, small_trial_dict(data={"max_length": 128, "on_long_records": "refuse"}))
    with pytest.raises(UserError, match="on_long_records: split"):
        prepare_trial_data(refuse)


def _every_mechanism_samples_records(data, canaries: dict) -> None:
    """Each private phase's ledger events sample at q = B/N, N its records counted apart from the phase (the
    training split's 200, CRT's private records), below its rows. CRT encodes its own redacted records, shorter
    than the dialogs: at 64 tokens they need several rows (its π_c here a regex policy: no spaCy pass)."""
    from sdp_core.mechanisms import get_mechanism

    regex = small_trial_dict()["detector"]["policy"]
    mechanisms = {"jft": {}, "crt": {"data": {"max_length": 64, **canaries}, "detector": {"conservative_policy": regex}},
                  "atdp": {},
                  "sdpsgd": {"model": {"arch": "lstm"}},
                  "jft_light": {"mechanism": {"name": "jft", "phase1_mode": "light_noise"}}}
    for name, sections in mechanisms.items():
        sections = {"mechanism": {"name": name}, "data": {"max_length": 128, **canaries}, **sections}
        cfg = parse_model(TrialConfig, small_trial_dict(**sections))
        plan = get_mechanism(cfg.mechanism.name)(data, cfg)
        records = plan.details["private_records"] if name == "crt" else 200
        private = [p for p in plan.phases if p.private]
        assert private and all(len(p.data) > records for p in private), name
        rates = {e.sample_rate for e in plan.ledger.plan}
        if name == "jft_light":  # phase 1 at q·m̃ (its estimate), its real q = B/N beside it
            rates = {plan.ledger.real_sample_rates.get(e.phase, e.sample_rate) for e in plan.ledger.plan}
        assert rates == {16 / records}, (name, rates)


def test_exposure_has_its_floor_and_interval_and_the_audit_its_one_run_parameters(tmp_path):
    cfg = parse_model(TrialConfig, small_trial_dict(
        mechanism={"name": "nodp"}, data={"canaries": {"format": "My ID is {dddd}", "count": 20, "repeats": 2}},
        evaluation={"exposure": True}))
    result = run_trial(cfg, tmp_path)
    exposure, audit = result.attacks["exposure"], result.attacks["empirical_epsilon"]
    assert exposure["floor"] == pytest.approx(1.44, abs=0.01) and exposure["count"] == 20
    assert len(exposure["exposures"]) + len(exposure["held_out_exposures"]) == 20
    low, high = exposure["interval"]
    assert low <= exposure["exposure_mean"] <= high
    assert audit["canaries"] == 20 and audit["group_size"] == 2 and audit["method"] == "one_run"
    assert result.metrics["empirical_epsilon_lower_bound"] == audit["epsilon_lower_bound"] >= 0
    assert result.canaries["inserted"] == len(exposure["exposures"]) and result.detector["windows"]["rows"] > 0


def test_a_one_step_trial_is_flagged_as_having_learned_nothing_and_a_trained_one_is_not():
    """One optimizer step leaves the model where it started: a uniform guess over the vocabulary, ln V nats a token
    (the reference, computed here from the tokenizer). Its console line says it learned nothing; a No-DP trial of
    17 steps, far below ln V, is not flagged."""
    from sdp_core.learning import learned_nothing, validation_loss

    one = run_trial(parse_model(TrialConfig, small_trial_dict(training={"max_steps": 1})))
    uniform = math.log(600)  # tokenizer.vocab_size of the small trial
    assert one.metrics["steps"] == 1
    assert one.metrics["untrained_val_loss"] == pytest.approx(uniform, rel=0.05)
    assert validation_loss(one.metrics) > 0.9 * uniform
    assert "LEARNED NOTHING: validation loss" in one.summary_line()
    trained = run_trial(parse_model(TrialConfig, small_trial_dict(mechanism={"name": "nodp"},
                                                                  training={"max_steps": 40, "learning_rate": 5e-3})))
    assert validation_loss(trained.metrics) < 0.75 * uniform
    assert learned_nothing(trained.metrics) is None and "LEARNED" not in trained.summary_line()


def test_an_epsilon_of_001_trial_is_flagged_its_noise_outweighing_its_signal():
    """At ε = 0.01 σ is so large that the summed noise of every step outweighs the most its clipped records can add:
    σ/(B·√T) from the ledger's σ, q and steps and the training records (B = q·N), computed here, is above 1."""
    from sdp_core.learning import learned_nothing

    result = run_trial(parse_model(TrialConfig, small_trial_dict(privacy={"target_epsilon": 0.01})))
    (event,) = result.ledger["plan"]
    batch = event["sample_rate"] * result.detector["records"]["train"]
    expected = event["noise_multiplier"] / (batch * math.sqrt(event["steps"]))
    assert expected > 1
    assert result.metrics["noise_to_signal"] == pytest.approx(expected, rel=1e-3)
    metrics = dict(result.metrics)
    assert learned_nothing(metrics) and "LEARNED NOTHING" in result.summary_line()
    metrics["untrained_val_loss"] = None  # the noise alone flags it, whatever its loss
    assert "noise outweighs" in (learned_nothing(metrics) or "")


def test_every_trial_of_a_sweep_evaluates_on_the_same_seeded_held_out_records(tmp_path, monkeypatch):
    """Trials that differ in seed and mechanism share their data, so they evaluate every metric on the same
    `evaluation.held_out_records` validation and test records."""
    import sdp_core.trial
    from sdp_core.sweep.prepare import prepare_shared

    seen: list[tuple[str, frozenset]] = []
    real = sdp_core.trial.utility_metrics

    def spy(model, data, prefix):
        seen.append((prefix, frozenset(data.record_index.tolist())))
        return real(model, data, prefix)

    monkeypatch.setattr(sdp_core.trial, "utility_metrics", spy)
    cfgs = [parse_model(TrialConfig, small_trial_dict(seed=seed, mechanism={"name": name},
                                                      evaluation={"held_out_records": 10},
                                                      training={"max_steps": 2}))
            for seed, name in ((0, "nodp"), (1, "dpsgd"))]
    shared = prepare_shared(cfgs)
    # as a sweep's trials read it, before any trial ran
    kept = [pickle.loads(pickle.dumps(split, protocol=5)) for split in (shared[data_key(cfgs[0])].data.validation,
                                                                          shared[data_key(cfgs[0])].data.test)]
    rows = [run_trial(cfg, prepared=shared[data_key(cfg)]) for cfg in cfgs]
    by_split = {prefix: {records for p, records in seen if p == prefix} for prefix in ("val", "test")}
    assert len(seen) == 6 and all(len(sets) == 1 for sets in by_split.values())  # one subset per split, all trials
    (validation,), (test,) = by_split["val"], by_split["test"]
    data = shared[data_key(cfgs[0])].data
    assert len(validation) == len(test) == 10 < data.validation.records
    assert validation <= set(data.validation.record_index.tolist()) and test <= set(data.test.record_index.tolist())
    assert all(r.metrics["val_perplexity_ci_low"] < r.metrics["val_perplexity"] < r.metrics["val_perplexity_ci_high"]
               for r in rows)
    # Drawn when the sweep planned its data, and pickled with the rows: a trial's subset takes no row of the split.
    monkeypatch.setattr(LMData, "subset", lambda *args: pytest.fail("the held-out split's rows were read"))
    drawn = [evaluation_rows(split, 10, cfgs[0].data.seed) for split in kept]
    assert [set(rows.record_index.tolist()) for rows in drawn] == [validation, test]
