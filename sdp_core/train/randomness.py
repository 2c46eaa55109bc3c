"""Privacy randomness: the secret numbers a private phase draws its Poisson samples and its Gaussian noise from.

DP-SGD's guarantee assumes that nobody can predict the noise added to a released model, nor which records a batch
holds. The sampling and a CPU's noise are drawn from a cryptographically secure stream, a GPU's noise from the GPU's
own generator, each keyed afresh per phase and rank from the OS entropy pool (`secrets`) and never stored:

- `Keystream`: AES-256 in counter mode (FIPS 197; NIST SP 800-38A, §6.5), OpenSSL's through `cryptography`. Nobody
  without the key can predict its next words from any number of past ones (far below the 2⁶⁴ blocks where counter
  mode's words become distinguishable from uniform): unlike a Mersenne Twister (torch's CPU generator), whose whole
  state follows linearly from 624 outputs.
  - Gaussian draws: the Box–Muller transform (Box & Muller 1958) of two 32-bit words a, b, in fp32: z = √(−2 ln u)
    ·cos θ and √(−2 ln u)·sin θ, u = (a + ½)·2⁻³² ∈ (0, 1], θ = 2π·b·2⁻³². Its tails reach √(66 ln 2) ≈ 6.8σ
    (torch's 24-bit uniforms stop at √(48 ln 2) ≈ 5.8σ). The transform is one compiled pass over the words
    (`compiled.compiled_or_eager`: vectorised log, square root, sine and cosine on torch's threads).
  - Bernoulli(q) draws (Poisson sampling): a word below ⌊q·2³²⌋, so a record is sampled with q rounded *down* to a
    multiple of 2⁻³²: never above the q the accountant charges (ε grows with q).
  On a CPU both are also faster than torch's generator made them: the noise of 2²⁰–2²² entries in 0.36–0.53× its
  time (secure mode 0.37–0.47×), the sampling in 0.18–0.26× (`benchmarks/noise_draw.py`).
- `TorchNoise`: torch's own generator as a noise source, where the noise is made on a GPU (its Philox generator,
  seeded with 63 secret bits: a stream made on the host would have to cross to the device) and in tests that compare
  with Opacus' draws. Philox is built for statistics, not secrecy: unpredictable without its seed, not proven so.

`privacy.secure_mode` (Holohan & Braghin 2021) makes each coordinate the sum of four draws, halved, as Opacus'
`_generate_noise` does. `privacy.reproducible_noise` (debugging only) derives the keys and seeds from the trial
seed, which every report publishes, so the guarantee does not hold.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from sdp_core.train.compiled import compiled_or_eager

RANK_SEED_STRIDE = 1_000_003
"""With reproducible noise, rank r draws from seed `seed + r * stride`: distinct streams per rank (S-DPSGD noises
each rank's hidden states on that rank)."""

ZERO_WORDS = np.zeros(2**18, np.uint32)
"""What the keystream encrypts, 1 MiB at a time (its ciphertext is then the keystream itself)."""
ZERO_WORDS.flags.writeable = False

BOX_MULLER_PAIRS = 2**21
"""Pairs of words a Gaussian draw transforms in one call: a CPU's whole noise block (`noise.noise_block`), and for a
larger parameter no more than 16 MiB of words at a time (secure mode's four draws, 64 MiB)."""


@runtime_checkable
class NoiseSource(Protocol):
    """Where a private step's Gaussian noise comes from."""

    @property
    def device(self) -> torch.device: ...

    def normal(self, size: int, std: float, secure: bool = False) -> torch.Tensor:
        """`size` independent N(0, std²) draws, fp32 and flat, on `device`; `secure`: each the sum of four, halved."""
        ...


class Keystream:
    """AES-256-CTR's keystream (the encryption of zeros) from a 32-byte key and a 128-bit initial counter block, and
    the Gaussian and Bernoulli draws made from its 32-bit words (see the module docstring). A noise source on the
    host."""

    def __init__(self, key: bytes, counter: int = 0) -> None:
        self._encryptor = Cipher(algorithms.AES256(key), modes.CTR(counter.to_bytes(16, "big"))).encryptor()

    @classmethod
    def from_entropy(cls) -> Keystream:
        """A stream nobody can regenerate: its key from the OS entropy pool, kept in this object only."""
        return cls(secrets.token_bytes(32))

    @classmethod
    def from_seed(cls, seed: int, purpose: str) -> Keystream:
        """A stream anyone with the seed regenerates (debugging only): its key is SHA-256 of the seed and purpose."""
        return cls(hashlib.sha256(f"sdp-sweep {purpose} {seed}".encode()).digest())

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def words(self, n: int) -> np.ndarray:
        """The stream's next `n` 32-bit words (its next 4n bytes, in the machine's byte order)."""
        out = np.empty(n + 4, np.uint32)  # `update_into` asks for a block's room beyond the data
        into = out.data.cast("B")
        for start in range(0, n, len(ZERO_WORDS)):  # the zeros it encrypts stay one small buffer
            zeros = ZERO_WORDS[:min(len(ZERO_WORDS), n - start)]
            self._encryptor.update_into(zeros.data.cast("B"), into[4 * start:])
        return out[:n]

    def bernoulli(self, n: int, q: float) -> torch.Tensor:
        """`n` independent draws, each True with probability ⌊q·2³²⌋·2⁻³² (at most q, within 2⁻³² of it)."""
        return torch.from_numpy(self.words(n) < math.floor(q * 2**32))

    def normal(self, size: int, std: float, secure: bool = False) -> torch.Tensor:
        """`size` N(0, std²) draws (`secure`: each the sum of four, halved), fp32, `BOX_MULLER_PAIRS` pairs at a time:
        of a run of n pairs, its first n words are the pairs' u and the next n their θ (secure: four such blocks of
        2n words, one per draw), and its n values r·cos θ come first, then its n values r·sin θ."""
        if std == 0:  # as Opacus: no draw at all
            return torch.zeros(size)
        draws = 4 if secure else 1
        scale = std / 2 if secure else std  # halving is exact
        pairs = (size + 1) // 2
        out = torch.empty(2 * pairs)
        for start in range(0, pairs, BOX_MULLER_PAIRS):
            n = min(BOX_MULLER_PAIRS, pairs - start)
            words = torch.from_numpy(self.words(draws * 2 * n).view(np.int32)).view(draws, 2 * n)
            _box_muller_into(out[2 * start:2 * (start + n)], words, scale)
        return out[:size]


@compiled_or_eager
def _box_muller_into(out: torch.Tensor, words: torch.Tensor, scale: float) -> None:
    """out [2n] = scale · Σ_k (r_k·cos θ_k, r_k·sin θ_k) over the k rows of words [k, 2n] (32-bit words read as
    int32): each row's first n words are u, the next n θ (see the module docstring)."""
    n = words.shape[1] // 2
    unsigned = words.long() & 0xFFFFFFFF
    u = (unsigned[:, :n].float() + 0.5) * 2.0**-32  # a word rounds to fp32 (exact below 2²⁴): u stays in (0, 1]
    radius = torch.sqrt(torch.log(u) * -2.0) * scale
    angle = unsigned[:, n:].float() * (2 * math.pi * 2.0**-32)
    draws = torch.cat([radius * torch.cos(angle), radius * torch.sin(angle)], 1)
    total = draws[0]
    for k in range(1, len(draws)):  # unrolled: a reduction over the rows vectorises worse
        total = total + draws[k]
    out.copy_(total)


@dataclass(frozen=True)
class TorchNoise:
    """torch's generator as a noise source: Opacus' own draws (`_generate_noise`), on the generator's device."""

    generator: torch.Generator

    @property
    def device(self) -> torch.device:
        return self.generator.device

    def normal(self, size: int, std: float, secure: bool = False) -> torch.Tensor:
        from opacus.optimizers.optimizer import _generate_noise  # Opacus (and its torch dynamo) only where it draws

        reference = torch.empty((), device=self.device).expand(size)  # a shape and a device, no memory of its own
        return _generate_noise(std=std, reference=reference, generator=self.generator, secure_mode=secure)


@dataclass(frozen=True)
class PrivacyRandomness:
    """The randomness of one phase on one rank: `sampling` (batch membership, on the host) and `noise` (on the
    model's device: a `Keystream` on a CPU, torch's Philox on a GPU).

    Secure (the default, a private phase): every key and seed from the OS entropy pool, fresh per phase and rank,
    never stored, so nothing published regenerates the noise or the Poisson samples.
    Reproducible (`privacy.reproducible_noise`, for debugging only), and public phases: both from the trial seed.
    """

    sampling: Keystream
    noise: NoiseSource

    @classmethod
    def for_phase(cls, seed: int, device: torch.device, private: bool, reproducible: bool, rank: int = 0
                  ) -> PrivacyRandomness:
        on_host = device.type == "cpu"
        if private and not reproducible:
            noise = Keystream.from_entropy() if on_host else TorchNoise(
                torch.Generator(device=device).manual_seed(secrets.randbits(63)))
            return cls(Keystream.from_entropy(), noise)
        rank_seed = seed + rank * RANK_SEED_STRIDE
        noise = Keystream.from_seed(rank_seed, "noise") if on_host else TorchNoise(
            torch.Generator(device=device).manual_seed(rank_seed + 1))
        return cls(Keystream.from_seed(rank_seed, "sampling"), noise)
