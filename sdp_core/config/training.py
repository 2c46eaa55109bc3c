"""Privacy, training and evaluation settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from sdp_core.config.base import Strict


class PrivacyConfig(Strict):
    target_epsilon: float = Field(3.0, gt=0)
    delta: float = Field(1e-5, gt=0, lt=1)
    accountant: Literal["rdp", "prv", "pld"] = "rdp"
    max_grad_norm: float = Field(1.0, gt=0, description="C: per-record clipping norm")
    compare_add_remove: bool = Field(
        False, description="also report ε for add/remove neighbours beside the notion's own relation (SDP and "
        "confidentiality: replace-one), labelled as a comparison with papers, not as the guarantee")
    reproducible_noise: bool = Field(
        False, description="debugging only: draw DP noise and Poisson samples from the trial seed, which every "
        "report publishes, so the guarantee does not hold (every line that prints its ε says so, and the report "
        "counts it among no guaranteed trials); default: AES-256-CTR keystreams keyed from the OS entropy pool "
        "(a GPU's noise: its Philox generator, seeded from it)")
    secure_mode: bool = Field(
        False, description="Opacus' secure mode for the DP noise: each coordinate is the sum of four Gaussian draws "
        "halved (Holohan & Braghin 2021), which resists the floating-point attacks that recover the noise from a "
        "released value's low bits; four times the noise draws (docs/privacy.md)")


class TrainingConfig(Strict):
    batch_size: int = Field(32, ge=1, description="expected (Poisson) batch size of private steps, in records (each "
                            "with all its rows); rows in public steps")
    learning_rate: float = Field(1e-3, gt=0)
    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1, description="cap on optimizer steps per phase")
    private_max_steps: int | None = Field(
        None, ge=1, description="cap on the steps of each private (DP) phase instead of max_steps: equal private "
        "steps across mechanisms whose public phases differ (S-DPSGD: batches; JFT light noise: both its phases)")
    max_tokens: int | None = Field(
        None, ge=1, description="compute budget: the most tokens a trial trains on, over all its phases (public and "
        "private), a private phase's tokens counted from what neighbouring datasets share (under DP a record at the "
        "held-out validation records' mean length; under SDP and confidentiality each secret at the held-out mean "
        "per secret), so no private record's length sets the steps; every phase keeps the same share of its planned "
        "steps, at least one. "
        "Equal compute across mechanisms whose phases differ (JFT's two phases, CRT's alternating epochs)")
    optimizer: Literal["adamw", "sgd"] = Field(
        "adamw", description="torch's AdamW or SGD, in torch's fused form (one multi-tensor operation updates every "
        "trained parameter)")
    weight_decay: float = Field(0.0, ge=0)
    grad_sample_mode: Literal["bk", "hooks"] = Field(
        "bk", description="how private steps clip per-record gradients: bk (book-keeping: one backward, no per-sample "
        "gradients) or hooks (Opacus' per-sample gradients)")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="forward and backward under autocast (bf16, fp16 with loss scaling) or fp32; weights, "
        "per-record norms, clipping, the clipped sum and the noise stay fp32; auto: bf16 on a GPU that has it, "
        "fp32 otherwise")
    loss_scale: float = Field(1024.0, gt=0, description="precision fp16: the loss scale (fixed in private steps)")
    tf32: bool = Field(True, description="TF32 tensor-core matmuls for fp32 work on an NVIDIA GPU")
    keep_host_memory: bool = Field(True, description="training on a CPU: keep freed memory for the next step "
                                   "(glibc's malloc: no mmap of its own per large tensor, no trim), so a step does "
                                   "not fault every page of its tensors in again (30-50 % of a gpt2-tiny step); "
                                   "costs 80-240 MB more peak memory there")
    shared_rows_mb: int | None = Field(
        128, ge=0, description="a sweep's trial reads its rows from Ray's object store (shared memory, or files "
        "where it spills), and each batch maps the pages around its rows into the trial's process: once a phase "
        "has mapped this many MB more than at its start, the pages are unmapped after each piece of a batch "
        "(their data stays in the store; reading them again faults them back in, about 5 µs per 64 KiB), so a "
        "trial's memory stays bounded whatever the rows' size; null: never")
    workers: int = Field(1, ge=1, description="Ray Train workers for the private phases")
    cpu_per_worker: float = Field(0.5, gt=0, description="CPUs each CPU Ray Train worker asks for (fractional, "
                                  "so that workers fit beside their trial on a small machine)")

    @field_validator("grad_sample_mode", mode="before")
    @classmethod
    def _no_ghost(cls, value: object) -> object:
        if value == "ghost":
            raise ValueError("ghost (Opacus' ghost clipping) is not offered: its norms carry no bound on their rounding, "
                             "so one record could add more than C; bk computes the same ghost norms with a proven "
                             "bound, in one backward instead of two")
        return value


HELD_OUT_RECORDS = 2_000
"""The default `evaluation.held_out_records`: how many validation (and test) records a trial evaluates on.

A trial reads the validation records twice (before training, `untrained_val_loss`, and after) and the test records
once, a forward pass each: 3·E record forwards for E records a split, while training a record costs about three
(the backward pass is about twice the forward, more under DP). Evaluation therefore costs about E / (records trained)
of training: with E = 2,000, at most 10 % of a trial that trains 20,000 records (one epoch of 20,000, two of 10,000),
2 % of one epoch of 100,000, and the same 6,000 forwards at any N. Below that the held-out sets of the default
`data.validation_fraction` (10 %) hold fewer records than E and are read whole. An interval's width shrinks as
1/√E (records are the sampled unit, `metrics.ratio_interval`): 2,000 records give one √5 ≈ 2.2 times narrower than
the 400 of the default generated validation set, which is what a sweep compares trials with.
"""


class EvaluationConfig(Strict):
    """Canary exposure and membership inference attack a language model's token likelihoods: for a classifier
    (model.arch roberta) they do not apply and are skipped, whatever these flags say."""

    exposure: bool = True
    exposure_method: Literal["exact", "estimate"] = "exact"
    exposure_limit: int = Field(1_000_000, ge=1, description="largest secret space enumerated exactly")
    mia: bool = True
    max_eval_records: int = Field(1000, ge=1, description="training records membership inference attacks (members)")
    held_out_records: int | None = Field(
        HELD_OUT_RECORDS, ge=2, description="validation and test records each utility metric (and its interval) is "
        "computed on: a subset drawn by data.seed, the same for every trial of a sweep; null: every held-out record")
