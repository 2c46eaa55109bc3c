"""Selective-DPSGD: segmentation, hidden-state release, exactness of the packed private step, exact accounting."""

from __future__ import annotations

import copy

import dp_accounting
import dp_accounting.pld
import dp_accounting.rdp
import pytest
import torch

from sdp_core import tensors
from sdp_core.config.trial import TrialConfig
from sdp_core.errors import PrivacyError
from sdp_core.mechanisms import sdpsgd as S
from sdp_core.mechanisms.base import calibrate
from sdp_core.preparation import TrialData, TrialRecords
from sdp_core.models.lstm import LSTMLM
from sdp_core.privacy import joint_noise_multiplier
from sdp_core.tensors import LMData, per_record_loss
from sdp_core.train.loop import StepContext, ledger_key, train_phase
from sdp_core.train.randomness import Keystream, TorchNoise

VOCAB, T = 40, 12


@pytest.fixture(autouse=True)
def _one_thread():
    """DPLSTM runs many tiny matmuls: on a shared 2-core machine intra-op threads make them ~10x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _data(sensitive_rows: list[list[int]], lengths: list[int], seed: int = 0) -> LMData:
    """Rows of T random tokens; row r has `lengths[r]` tokens (the rest padding) and the given sensitive indices."""
    n = len(lengths)
    ids = torch.randint(3, VOCAB, (n, T), generator=torch.Generator().manual_seed(seed))
    weights = torch.zeros(n, T)
    sensitive = torch.zeros(n, T, dtype=torch.bool)
    for r, (sens, length) in enumerate(zip(sensitive_rows, lengths)):
        weights[r, 1:length] = 1.0
        sensitive[r, sens] = True
    return LMData(ids, weights, sensitive, torch.arange(n))


def _cfg(**training) -> TrialConfig:
    return TrialConfig(model={"arch": "lstm", "preset": "lstm-200"}, mechanism={"name": "sdpsgd"},
                       privacy={"target_epsilon": 3.0, "max_grad_norm": 1.0},
                       training={"batch_size": 4, "learning_rate": 1e-2, **training})


# ------------------------------------------------------------------------------------------ segmentation


@pytest.mark.parametrize("sensitive, length, expected", [
    ([], 8, [(0, 8, False)]),
    ([3, 4], 10, [(0, 2, False), (2, 5, True), (5, 10, False)]),
    ([1], 6, [(0, 2, True), (2, 6, False)]),  # starts private: the leading <eos> predicts a secret
    ([4, 7], 9, [(0, 3, False), (3, 5, True), (5, 6, False), (6, 8, True), (8, 9, False)]),
    ([4, 6], 9, [(0, 3, False), (3, 7, True), (7, 9, False)]),  # one public token between: it predicts a secret
    ([8], 9, [(0, 7, False), (7, 9, True)]),  # ends private
])
def test_segments_alternate_cover_the_sequence_and_start_one_token_early(sensitive, length, expected):
    data = _data([sensitive], [length])
    assert int(S.row_lengths(data.weights)[0]) == length
    segs = S.split_segments(S.private_positions(data.sensitive)[0], length)
    assert segs == expected
    assert all(a[2] != b[2] for a, b in zip(segs, segs[1:]))  # alternate
    assert [t for start, end, _ in segs for t in range(start, end)] == list(range(length))  # concatenate back
    for start, end, private in segs:
        reads_or_predicts = [t for t in range(start, end) if t in sensitive or t + 1 in sensitive]
        assert bool(reads_or_predicts) == private
    for t in sensitive:  # the token before each sensitive token is in the same private segment
        assert any(p and start <= t - 1 and t < end for start, end, p in segs)


def test_segment_table_slots_align_private_segments_by_index():
    data = _data([[3, 4, 8], [1], [], [5]], [12, 9, 7, 12])
    table = S.segment_table(data)
    assert table.private_segments == 2
    assert table.private_counts().tolist() == [2, 1, 0, 1]
    b = table.bounds
    assert b[0].tolist() == [[0, 2], [2, 5], [5, 7], [7, 9], [9, 12]]
    assert b[1, 0].tolist() == [0, 0] and b[1, 1].tolist() == [0, 2] and b[1, 2].tolist() == [2, 9]
    assert b[2, 0].tolist() == [0, 7] and (b[2, 1:, 1] == b[2, 1:, 0]).all()  # no private slot
    lengths = b[..., 1] - b[..., 0]
    assert lengths.sum(1).tolist() == [12, 9, 7, 12]  # slots cover each row exactly


# --------------------------------------------------------------------------------------- hidden state


@pytest.mark.parametrize("secure", [False, True])
def test_release_state_clips_each_row_then_adds_noise_of_std_sigma_c(secure):
    g, noise = torch.Generator().manual_seed(0), Keystream.from_seed(0, "test")
    h, c = torch.randn(1, 200, 300, generator=g), torch.randn(1, 200, 300, generator=g)
    h[:, :3], c[:, :3] = h[:, :3] * 1e-3, c[:, :3] * 1e-3  # rows 0-2 already inside the ball
    clip = 2.0
    rows = torch.arange(200)  # each row its own record
    ch, cc = S.release_state((h, c), clip, 0.0, noise, rows)
    norms = torch.cat([ch, cc], 2)[0].norm(dim=1)
    assert torch.allclose(norms[3:], torch.full((197,), clip), rtol=1e-4)
    assert torch.allclose(ch[:, :3], h[:, :3]) and torch.allclose(cc[:, :3], c[:, :3])
    scale = clip / torch.cat([h, c], 2)[0, 3:].norm(dim=1)
    assert torch.allclose(ch[0, 3:], h[0, 3:] * scale[:, None], atol=1e-6)  # direction kept

    sigma = 0.7
    nh, nc = S.release_state((h, c), clip, sigma, noise, rows, secure)
    added = torch.cat([nh - ch, nc - cc])
    assert abs(added.std().item() / (sigma * clip) - 1) < 0.02
    assert abs(added.mean().item()) < 0.02 * sigma * clip


def test_release_state_clips_a_records_rows_together():
    """A record of several rows (windows) releases one hidden state per row: together they are its sensitivity, so
    they are clipped as one vector."""
    g, noise = torch.Generator().manual_seed(0), Keystream.from_seed(0, "test")
    h, c = torch.randn(2, 5, 30, generator=g), torch.randn(2, 5, 30, generator=g)
    records = torch.tensor([1, 0, 1, 2, 1])  # record 1 has three rows
    ch, cc = S.release_state((h, c), 2.0, 0.0, noise, records)
    per_row = torch.cat([ch, cc]).transpose(0, 1).flatten(1).square().sum(1)
    per_record = torch.zeros(3).index_add_(0, records, per_row).sqrt()
    assert torch.allclose(per_record, torch.full((3,), 2.0), rtol=1e-4)
    factor = ch[0, 0, 0] / h[0, 0, 0]
    assert torch.allclose(ch[:, [0, 2, 4]], h[:, [0, 2, 4]] * factor, atol=1e-6)  # one factor for all its rows


@pytest.mark.parametrize("k", [1, 3, 6])
def test_split_sigma_makes_the_batch_releases_compose_to_sigma_batch(k):
    for ratio in (0.5, 1.0, 3.0):
        g, h = S.split_sigma(0.9, k, ratio)
        assert h == pytest.approx(ratio * g)
        assert joint_noise_multiplier(*[g, h] * k) == pytest.approx(0.9)
        assert (k * (g**-2 + h**-2)) ** -0.5 == pytest.approx(0.9)


# ---------------------------------------------------------------------------------- exact private step


def test_private_segment_step_without_noise_or_clipping_equals_plain_steps_per_record():
    data = _data([[3, 4, 8], [1], [5, 6], [2]], [12, 9, 12, 6])
    table = S.segment_table(data)
    torch.manual_seed(0)
    lm = LSTMLM(VOCAB, 8, 8)
    plain = copy.deepcopy(lm)
    lr, batch = 0.5, 4
    phase = S.SelectivePhase("p", data, True, 1, batch, sigmas=(0.0,), max_grad_norm=1e6, segments=table)
    sgd = torch.optim.SGD(lm.parameters(), lr=lr)
    step = S.SelectiveStep(StepContext(lm, sgd, "hooks", TorchNoise(torch.Generator())), phase)
    rows = torch.arange(4)
    start, end = table.bounds[rows, 1, 0], table.bounds[rows, 1, 1]  # first private slot: lengths 3, 2, 3, 2
    order = torch.argsort(end - start, descending=True, stable=True)
    assert order.tolist() == [0, 2, 1, 3]  # packing reorders the rows
    seg = S.gather_segments(data, rows[order], start[order], end[order])
    g = torch.Generator().manual_seed(1)
    state = (torch.randn(1, 4, 8, generator=g), torch.randn(1, 4, 8, generator=g))  # a carried state

    with torch.no_grad():
        losses = S.segment_loss(S.segment_forward(plain, seg, state)[0], seg)
    h, c = step.private(seg, state, 0.0)
    grad_samples = [p.grad_sample.clone() for p in step.lm.parameters()]  # kept by the DP optimizer until zero_grad
    total = [torch.zeros_like(p) for p in plain.parameters()]
    for j in range(4):
        n = int(seg.lengths[j])
        plain.zero_grad()
        logits, (hj, cj) = plain.forward_with_state(seg.ids[j:j + 1, :n], (state[0][:, j:j + 1], state[1][:, j:j + 1]))
        # per_record_loss on the segment plus the next token is the segment's loss
        ids = torch.cat([seg.ids[j, :n], seg.targets[j, n - 1:n]])[None]
        weights = torch.cat([torch.zeros(1), seg.weights[j, :n]])[None]
        loss = per_record_loss(torch.cat([logits, logits[:, :1]], 1), ids, weights)
        loss.sum().backward()
        assert loss.item() == pytest.approx(losses[j].item(), rel=1e-5)
        assert torch.allclose(hj, h[:, j:j + 1], atol=1e-6) and torch.allclose(cj, c[:, j:j + 1], atol=1e-6)
        for gs, p, t in zip(grad_samples, plain.parameters(), total):
            assert torch.allclose(gs[j], p.grad, atol=1e-6)
            t += p.grad
    with torch.no_grad():
        for p in plain.parameters():
            p -= lr * total.pop(0) / batch  # the DP step's mean over the expected batch size
    for a, b in zip(plain.parameters(), step.close().parameters()):
        assert torch.allclose(a, b, atol=1e-6)


# ------------------------------------------------------------------------------------------ accounting


def _run(data: LMData, cfg: TrialConfig, monkeypatch, seed: int = 0):
    """Calibrate and run one S-DPSGD phase through the training loop; spy on every slot and hidden-state release."""
    table = S.segment_table(data)
    phase = S.selective_phase(S.PHASE_NAME, data, table, cfg, cfg.training.epochs)
    [phase], ledger = calibrate([phase], cfg, notion="SDP", held_out=data, touches="private")
    calls = {"private": [], "release": [], "public_states": [], "noise_only": 0}
    private, public, release_state = S.SelectiveStep.private, S.SelectiveStep.public, S.release_state

    def spy_private(self, seg, state, sigma):
        if seg is None:
            calls["noise_only"] += 1
        else:
            calls["private"].append((len(seg.lengths), sigma))
        return private(self, seg, state, sigma)

    def spy_release(state, clip, sigma, noise, records, secure):
        assert secure is False  # the step's secure mode (off by default) reaches the hidden state's noise
        out = release_state(state, clip, sigma, noise, records, secure)
        calls["release"].append((state, out, clip, sigma))
        return out

    def spy_public(self, seg, state):
        if seg is not None:
            calls["public_states"].append((state[0].clone(), state[1].clone()))
        return public(self, seg, state)

    monkeypatch.setattr(S.SelectiveStep, "private", spy_private)
    monkeypatch.setattr(S.SelectiveStep, "public", spy_public)
    monkeypatch.setattr(S, "release_state", spy_release)
    torch.manual_seed(seed)
    model = LSTMLM(VOCAB, 8, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.training.learning_rate)
    stats = train_phase(model, optimizer, phase, ledger, seed)
    return phase, ledger, stats, calls


def _subsampled_gaussian_epsilon(q: float, sigma: float, events: int, delta: float) -> float:
    """dp_accounting's PLD ε of `events` Poisson-subsampled Gaussians, replace-one neighbours (SDP's relation)."""
    accountant = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    return accountant.compose(event, events).get_epsilon(delta)


def test_ledger_charges_one_event_per_batch_composing_its_k_slots_and_refuses_more(monkeypatch):
    # K = 3 comes from one row only: most Poisson batches lack slots 2-3 and take noise-only steps there
    rows = [[2], [3, 4], [1, 5, 9], [], [6], [4], [2, 7], [8], [3], [5]]
    data = _data(rows, [12] * len(rows))
    cfg = _cfg(epochs=2, batch_size=3)
    cfg.privacy.accountant = "pld"
    phase, ledger, stats, calls = _run(data, cfg, monkeypatch)
    k, batches = 3, phase.epoch_steps()
    assert phase.segments.private_segments == k and batches == [3, 3]
    assert ledger.spent_steps == {ledger_key(S.PHASE_NAME, e): b for e, b in enumerate(batches)}
    assert ledger.complete and stats.steps == sum(batches) and stats.losses == []
    sigma_batch = phase.sigmas[0]
    assert [e.noise_multiplier for e in ledger.plan] == [sigma_batch, sigma_batch]
    assert all(e.sample_rate == pytest.approx(3 / 10) and e.touches == "private" for e in ledger.plan)
    sigma_grad, sigma_hidden = S.split_sigma(sigma_batch, k, 1.0)
    assert {s for _, s in calls["private"]} == {sigma_grad}
    assert {(clip, s) for *_, clip, s in calls["release"]} == {(1.0, sigma_hidden)}
    assert 0 < calls["noise_only"] and len(calls["private"]) + calls["noise_only"] == k * sum(batches)

    # Reference, built here: the 2K Gaussian releases of a batch (σ_g, σ_h per slot) are one Gaussian for
    # dp_accounting's RDP (unsampled composition is exact), and that Gaussian is Poisson-subsampled once a batch.
    rdp = dp_accounting.rdp.RdpAccountant()
    composed = rdp.compose(dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(sigma_grad), dp_accounting.GaussianDpEvent(sigma_hidden)] * k))
    single = dp_accounting.rdp.RdpAccountant().compose(dp_accounting.GaussianDpEvent(sigma_batch))
    assert composed.get_epsilon(1e-5) == pytest.approx(single.get_epsilon(1e-5), rel=1e-9)
    reference = _subsampled_gaussian_epsilon(3 / 10, sigma_batch, sum(batches), cfg.privacy.delta)
    assert ledger.epsilon() == pytest.approx(reference, rel=1e-2)
    assert ledger.epsilon() <= cfg.privacy.target_epsilon
    # Charging each slot as its own subsampled event (the old ledger) claims less (2-4.5x less at small q).
    per_slot = _subsampled_gaussian_epsilon(3 / 10, joint_noise_multiplier(sigma_grad, sigma_hidden), k * sum(batches),
                                            cfg.privacy.delta)
    assert per_slot < reference
    with pytest.raises(PrivacyError):
        ledger.record_steps(ledger_key(S.PHASE_NAME, 1), 1)


def test_every_private_segment_releases_a_noised_state_that_the_next_segment_starts_from(monkeypatch):
    rows = [[3, 4, 8], [1], [5, 6], [2, 9]]  # private segments: 2, 1, 1, 2
    data = _data(rows, [12] * 4)
    cfg = _cfg(batch_size=4, epochs=2)  # q = 1: every row in every batch, one batch per epoch
    phase, ledger, stats, calls = _run(data, cfg, monkeypatch)
    assert stats.steps == 2 and stats.losses == []  # no loss of a private batch leaves the loop
    releases = calls["release"]
    assert [out[0].shape[1] for _, out, *_ in releases] == [4, 2] * 2  # rows having private slot 1, then 2
    for state, (h, c), _clip, sigma in releases:
        assert sigma > 0
        before = torch.cat([state[0], state[1]], 2)
        noised = torch.cat([h, c], 2)
        assert not torch.allclose(before, noised)
        assert ((noised - before).abs() > 0).all()  # every coordinate got noise
    # the public slot after the first private slot starts (for the rows that have it) from the released state
    first_release = releases[0][1]
    after = calls["public_states"][1]  # public slots of batch 1: 0, then 1
    assert after[0].shape[1] == 4
    has_public_1 = phase.segments.bounds[:, 2, 1] > phase.segments.bounds[:, 2, 0]
    assert has_public_1.all()
    packed_order = torch.argsort(phase.segments.bounds[:, 1, 1] - phase.segments.bounds[:, 1, 0], descending=True,
                                 stable=True)
    released_by_row = torch.empty_like(first_release[0])
    released_by_row[:, packed_order] = first_release[0]
    public_order = torch.argsort(phase.segments.bounds[:, 2, 1] - phase.segments.bounds[:, 2, 0], descending=True,
                                 stable=True)
    assert torch.allclose(after[0], released_by_row[:, public_order])


def test_end_to_end_on_customersim_spends_at_most_the_target_and_learns():
    from sdp_core.data.customersim import generate_customersim
    from sdp_core.data.records import Splits
    from sdp_core.text.encode import encode
    from sdp_core.text.redaction import redact
    from sdp_core.text.tokenizer import train_bpe_tokenizer

    records = generate_customersim(100, seed=0)
    spans = [list(r.spans) for r in records]
    tokenizer = train_bpe_tokenizer([redact(r.text, s) for r, s in zip(records, spans)], 400)
    data = encode([r.text for r in records], spans, tokenizer, 128)
    cfg = TrialConfig(model={"arch": "lstm", "preset": "lstm-200"}, mechanism={"name": "sdpsgd"},
                      privacy={"target_epsilon": 8.0, "max_grad_norm": 1.0},
                      training={"batch_size": 20, "epochs": 2, "max_steps": 8, "learning_rate": 2e-2})
    d = TrialData(TrialRecords(Splits(records, [], []), spans), len(records), data, data, data, data, tokenizer)
    plan = S.sdpsgd(d, cfg)
    [phase] = plan.phases
    assert plan.ledger.notion == "SDP" and plan.details["private_steps_per_batch"] >= 3
    assert 0 < plan.details["private_position_fraction"] < 0.5

    torch.manual_seed(0)
    model = LSTMLM(len(tokenizer), 64, 64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.training.learning_rate)

    def loss() -> float:
        with torch.no_grad():
            ids = data.input_ids.long()
            return per_record_loss(model(ids), ids, data.weights).mean().item()

    before = loss()
    stats = train_phase(model, optimizer, phase, plan.ledger, 0)
    report = plan.ledger.report()
    assert report["complete"] and report["notion"] == "SDP"
    assert 0 < report["epsilon"] <= cfg.privacy.target_epsilon
    assert stats.steps == 8
    after = loss()
    print(f"full-data loss {before:.3f} -> {after:.3f}")
    assert after < before - 0.3


def test_segment_summary_read_block_by_block_is_what_the_whole_segment_table_gives(monkeypatch):
    monkeypatch.setattr(tensors, "BLOCK_ROWS", 3)
    g = torch.Generator().manual_seed(1)
    sensitive = [torch.nonzero(torch.rand(T, generator=g) < 0.2).flatten().tolist() for _ in range(20)]
    data = _data(sensitive, torch.randint(0, T + 1, (20,), generator=g).tolist())
    table, summary = S.segment_table(data), S.segment_summary(data)
    assert summary.private_segments == table.private_segments >= 2
    assert summary.mean_private_segments == float(table.private_counts().double().mean())
    assert summary.private_fraction == table.private_fraction()
    handmade = S.segment_summary(_data([[3, 4, 8], [1], [], [5]], [12, 9, 7, 12]))
    assert (handmade.private_segments, handmade.mean_private_segments) == (2, 1.0)
    assert handmade.private_fraction == pytest.approx((5 + 2 + 0 + 2) / (12 + 9 + 7 + 12))  # positions t-1, t of each
