"""Shared builders for the attack tests (no tests here): tokenizers, tiny models, LMData, a few training steps."""

from __future__ import annotations

import functools

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel

from sdp_core.data.customersim import generate_customersim
from sdp_core.data.records import Record
from sdp_core.models.gpt2 import GPT2LM
from sdp_core.text.tokenizer import SPECIAL_TOKENS, train_bpe_tokenizer, wrap
from sdp_core.tensors import LMData
from sdp_core.train.loop import Phase, make_optimizer, train_phase


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Import into a test module to run it with one intra-op thread: on the shared 2-core test machine, two
    threads spin-wait against other processes and run 6-10x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@functools.lru_cache(maxsize=None)
def digit_tokenizer():
    """The project's BPE (digits one per token), trained on CustomerSim text."""
    return train_bpe_tokenizer([r.text for r in generate_customersim(300, 0)], 600)


@functools.lru_cache(maxsize=None)
def merging_tokenizer():
    """A byte-level BPE *without* the digit split, trained on text full of numbers: it merges digit runs."""
    gen = torch.Generator().manual_seed(0)
    numbers = torch.randint(0, 10, (3000, 6), generator=gen).tolist()
    texts = [f"My ID is {''.join(map(str, n))}. Call {''.join(map(str, n[:3]))}" for n in numbers]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    return wrap(tok)


def small_gpt2(vocab_size: int, seed: int = 0, n_embd: int = 32) -> GPT2LM:
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab_size, n_positions=256, n_layer=1, n_embd=n_embd, n_head=2,
                        tie_word_embeddings=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LM(GPT2LMHeadModel(config))


def encode(tokenizer, records: list[Record], max_length: int = 160) -> LMData:
    """`<eos> tokens <eos>` rows; `sensitive` marks tokens overlapping a gold span."""
    rows, sens = [], []
    for r in records:
        enc = tokenizer(r.text, add_special_tokens=False, return_offsets_mapping=True)
        hit = [any(s.start < b and a < s.end for s in r.spans or ()) for a, b in enc.offset_mapping]
        rows.append(([tokenizer.eos_token_id] + enc.input_ids + [tokenizer.eos_token_id])[:max_length])
        sens.append(([False] + hit + [False])[:max_length])
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    sensitive = torch.zeros((len(rows), width), dtype=torch.bool)
    weights = torch.zeros((len(rows), width))
    for i, (row, s) in enumerate(zip(rows, sens)):
        ids[i, : len(row)] = torch.tensor(row)
        sensitive[i, : len(s)] = torch.tensor(s)
        weights[i, 1 : len(row)] = 1.0
    return LMData(ids, weights, sensitive, torch.arange(len(rows)))


def train(model, data: LMData, steps: int, lr: float = 1e-2, batch_size: int = 8, seed: int = 0):
    """`steps` plain (public) optimizer steps on `data`."""
    phase = Phase("fit", data, private=False, epochs=steps, batch_size=batch_size, max_steps=steps)
    train_phase(model, make_optimizer(model, "adamw", lr, 0.0), phase, None, seed)
    return model.eval()
