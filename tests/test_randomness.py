"""Privacy randomness (`train.randomness`): the keystream is AES-256-CTR by the standard's own test vectors, its
Gaussian draws are the Box–Muller transform of its words (a float64 implementation of the textbook formula) and
N(0, σ²) by scipy's tests, its Bernoulli draws never exceed q, and a private phase's streams are keyed from the OS
entropy pool, not from the published seed."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from scipy import stats

from sdp_core.train import randomness
from sdp_core.train.randomness import ZERO_WORDS, Keystream, PrivacyRandomness

# NIST SP 800-38A, Appendix F.5.5 (CTR-AES256.Encrypt): key, initial counter block, four plaintext blocks, ciphertext.
NIST_KEY = "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4"
NIST_COUNTER = "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff"
NIST_PLAINTEXT = ("6bc1bee22e409f96e93d7e117393172a" "ae2d8a571e03ac9c9eb76fac45af8e51"
                  "30c81c46a35ce411e5fbc1191a0a52ef" "f69f2445df4f9b17ad2b417be66c3710")
NIST_CIPHERTEXT = ("601ec313775789a5b7a7f504bbf3d228" "f443e3ca4d62b59aca84e990cacaf5c5"
                   "2b0930daa23de94ce87017ba2d84988d" "dfc9c58db67aada613c2dd08457941a6")
CPU = torch.device("cpu")


def test_words_continue_one_stream_across_calls_and_buffers():
    """Words read in uneven calls, each longer than the buffer of zeros the stream encrypts at a time, are the bytes
    one encryption of that many zeros gives."""
    key = bytes(range(32))
    stream = Keystream(key)
    sizes = [7, len(ZERO_WORDS) * 2 + 5, 1, len(ZERO_WORDS) - 3]
    read = b"".join(stream.words(n).tobytes() for n in sizes)
    one_shot = Cipher(algorithms.AES256(key), modes.CTR(bytes(16))).encryptor().update(bytes(4 * sum(sizes)))
    assert read == one_shot


def test_the_keystream_is_aes256_in_counter_mode_by_the_standards_vectors():
    """Ciphertext = plaintext ⊕ keystream, so the keystream is their XOR; read in two calls of uneven length, it
    continues where the first call stopped."""
    stream = Keystream(bytes.fromhex(NIST_KEY), counter=int(NIST_COUNTER, 16))
    keystream = stream.words(3).tobytes() + stream.words(13).tobytes()
    expected = bytes(p ^ c for p, c in zip(bytes.fromhex(NIST_PLAINTEXT), bytes.fromhex(NIST_CIPHERTEXT)))
    assert keystream == expected


@pytest.mark.parametrize("std, secure", [(2.5, False), (1e-3, False), (2.5, True)])
def test_normal_draws_are_the_box_muller_transform_of_the_words(std, secure, monkeypatch):
    """A float64 implementation of z = √(−2 ln u)·(cos θ, sin θ), u = (a + ½)/2³², θ = 2π·b/2³², on the words of an
    identically keyed stream, run by run as `Keystream` lays them out (secure: four draws' words per run, their
    values summed and halved), with runs of 2¹² pairs: within fp32's rounding (the worst case is r near 0, where u
    rounds to 1)."""
    monkeypatch.setattr(randomness, "BOX_MULLER_PAIRS", 2**12)
    size = 2 * randomness.BOX_MULLER_PAIRS + 1001  # odd: the last pair's sine is not used; runs of 2¹² and 501 pairs
    draws = 4 if secure else 1
    words = Keystream.from_seed(3, "test").words(draws * (size + 1)).astype(np.float64)
    z = Keystream.from_seed(3, "test").normal(size, std, secure).numpy()
    pairs, parts = (size + 1) // 2, []
    for start in range(0, pairs, randomness.BOX_MULLER_PAIRS):
        n = min(randomness.BOX_MULLER_PAIRS, pairs - start)
        run = words[draws * 2 * start:draws * 2 * (start + n)].reshape(draws, 2 * n)
        radius, angle = np.sqrt(-2 * np.log((run[:, :n] + 0.5) / 2**32)), 2 * math.pi * run[:, n:] / 2**32
        parts.append(np.concatenate([radius * np.cos(angle), radius * np.sin(angle)], 1).sum(0))
    reference = std * np.concatenate(parts)[:size] / (2 if secure else 1)
    assert z.dtype == np.float32 and z.shape == (size,)
    assert np.abs(z - reference).max() <= 2e-5 * std * draws


@pytest.mark.parametrize("secure", [False, True])
def test_normal_draws_are_gaussian_and_independent(secure):
    """N(0, σ²) by Kolmogorov–Smirnov; the right share beyond 4σ; no correlation between a pair's two draws (nor
    their squares), nor between neighbours. Secure: the sum of four draws, halved, the same distribution."""
    n, std = 1_000_000, 1.7
    z = Keystream.from_seed(0, "test").normal(n, std, secure).double().numpy() / std
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(z.mean()) < 5 / math.sqrt(n) and abs(z.std() - 1) < 5 / math.sqrt(2 * n)
    tail = int((np.abs(z) > 4).sum())  # expected 63.3: Poisson, within 4.5 standard deviations
    assert abs(tail - n * 2 * stats.norm.sf(4)) < 4.5 * math.sqrt(n * 2 * stats.norm.sf(4))
    half = n // 2
    for a, b in [(z[:half], z[half:2 * half]), (z[:half] ** 2, z[half:2 * half] ** 2), (z[:-1], z[1:])]:
        assert abs(stats.pearsonr(a, b).statistic) < 5 / math.sqrt(half)


def test_no_noise_draws_nothing():
    stream, twin = Keystream.from_seed(0, "test"), Keystream.from_seed(0, "test")
    assert torch.equal(stream.normal(10, 0.0), torch.zeros(10))
    assert np.array_equal(stream.words(4), twin.words(4))


def test_bernoulli_draws_sample_at_q_and_never_above_it():
    """Each draw is True with probability ⌊q·2³²⌋/2³² ≤ q: q within binomial error, and at the boundary a word w is
    taken iff w < q·2³² rounded down, so of all 2³² words no more than q·2³² are taken."""
    n, q = 1_000_000, 0.0312
    taken = Keystream.from_seed(1, "test").bernoulli(n, q)
    assert taken.dtype == torch.bool and taken.shape == (n,)
    assert abs(taken.double().mean().item() - q) < 5 * math.sqrt(q * (1 - q) / n)
    assert Keystream.from_seed(1, "test").bernoulli(n, 1.0).all()
    assert not Keystream.from_seed(1, "test").bernoulli(n, 0.0).any()
    k = 123_456_789
    boundary = Keystream.from_seed(1, "test")
    boundary.words = lambda n: np.array([k - 1, k, k + 1], np.uint32)  # type: ignore[method-assign]
    assert boundary.bernoulli(3, (k + 0.5) / 2**32).tolist() == [True, False, False]  # k + 1 of 2³² would exceed q
    assert boundary.bernoulli(3, (k + 1) / 2**32).tolist() == [True, True, False]


def test_a_private_phase_keys_its_streams_from_the_os_not_the_seed():
    """Secure: the same seed twice gives other draws (nothing published regenerates them), and sampling and noise
    are different streams. Reproducible (debugging): the seed regenerates them; each rank has streams of its own."""
    first, second = (PrivacyRandomness.for_phase(7, CPU, private=True, reproducible=False) for _ in range(2))
    assert isinstance(first.noise, Keystream)
    draws = [first.sampling.words(8), first.noise.words(8), second.sampling.words(8), second.noise.words(8)]
    assert len({d.tobytes() for d in draws}) == 4
    again = [PrivacyRandomness.for_phase(7, CPU, private=True, reproducible=True, rank=r) for r in (0, 0, 1)]
    assert torch.equal(again[0].noise.normal(50, 1.0), again[1].noise.normal(50, 1.0))
    assert np.array_equal(again[0].sampling.words(8), again[1].sampling.words(8))
    assert not np.array_equal(again[1].sampling.words(8), again[2].sampling.words(8))
    assert not torch.equal(again[1].noise.normal(50, 1.0), again[2].noise.normal(50, 1.0))
