"""Tokenizers: a byte-level BPE trained on redacted text only, or a pretrained one by name or path.

A tokenizer trained on raw private text puts secrets into its vocabulary (a name seen often enough becomes one
token), so ours is trained on text from which every known secret, detected or gold, is removed, and splits
digits one per token (Shi et al. 2022 §5: BPE avoids releasing "1234" as a vocabulary entry). `<mask>` is one
atomic special token: a redacted span is always exactly one token, which the loss ignores. For dialog data the
speaker tags (`SYS:`, `USR:` in CustomerSim; read from the data by `data.structure.speaker_tags`) are atomic special
tokens too; prose gets none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from sdp_core.errors import UserError
from sdp_core.io import atomic_write_text, cache_root, fingerprint
from sdp_core.data.structure import speaker_tags
from sdp_core.text.redaction import MASK

PAD, EOS = "<pad>", "<eos>"
SPECIAL_TOKENS = [PAD, EOS, MASK]


def train_bpe_tokenizer(redacted_texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on already-redacted texts; digits are pre-split one per token, and the speaker tags
    of dialog data are special tokens."""
    redacted_texts = list(redacted_texts)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS + list(speaker_tags(redacted_texts)),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(redacted_texts, trainer=trainer)
    return wrap(tok)


def cached_bpe_tokenizer(redacted_texts: list[str], vocab_size: int, cache_dir: Path | None = None
                         ) -> PreTrainedTokenizerFast:
    """`train_bpe_tokenizer`, trained once per (texts, vocabulary size) and kept in the cache (`tokenizers/`), so
    the trials of a sweep, which share their data, share one tokenizer instead of each training its own."""
    # `tags`: entries from before speaker tags were read from the data gave prose `SYS:`/`USR:` too.
    path = (cache_dir or cache_root() / "tokenizers") / f"bpe-tags-{vocab_size}-{fingerprint(redacted_texts)}.json"
    if path.is_file():
        try:
            return wrap(Tokenizer.from_file(str(path)))
        except Exception:  # a damaged entry is a cache miss
            pass
    tok = train_bpe_tokenizer(redacted_texts, vocab_size)
    atomic_write_text(path, tok.backend_tokenizer.to_str())
    return tok


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """The transformers view of a trained BPE; its special tokens beyond `<pad>`, `<eos>`, `<mask>` (speaker tags)
    stay special."""
    added = tok.get_added_tokens_decoder().values()
    extra = [t.content for t in added if t.special and t.content not in SPECIAL_TOKENS]
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        mask_token=MASK,
        additional_special_tokens=extra,
    )


def load_pretrained_tokenizer(name_or_path: str) -> PreTrainedTokenizerFast:
    """A HF tokenizer by hub name or local path, with `<mask>`, `<pad>`, `<eos>` added as needed.

    The model's embedding must then be resized (see `models.resize_for_tokenizer`).
    """
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(name_or_path)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot load tokenizer {name_or_path!r}: {str(e).splitlines()[0]}") from None
    tok.add_special_tokens({"pad_token": PAD, "eos_token": tok.eos_token or EOS, "mask_token": MASK})
    return tok


def save_tokenizer(tok: PreTrainedTokenizerFast, directory: str | Path) -> None:
    tok.save_pretrained(str(directory))


def load_saved_tokenizer(directory: str | Path) -> PreTrainedTokenizerFast:
    path = Path(directory)
    if not (path / "tokenizer.json").is_file():
        raise UserError("no tokenizer.json (not a saved trial model)", str(path))
    return PreTrainedTokenizerFast.from_pretrained(str(path))
