"""Speaker tags are read from the data: CustomerSim's tokenizer is unchanged, prose gets no speaker tokens."""

from __future__ import annotations

import json

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from sdp_core.data.classification import classification_splits
from sdp_core.data.customersim import generate_customersim
from sdp_core.text.redaction import MASK, redact
from sdp_core.data.structure import answering_speaker, speaker_tags
from sdp_core.text.tokenizer import EOS, PAD, cached_bpe_tokenizer, train_bpe_tokenizer


def test_dialog_tags_and_the_answering_speaker_come_from_the_data():
    dialogs = [r.text for r in generate_customersim(200, 0)]
    assert speaker_tags(dialogs) == ("SYS:", "USR:")
    assert answering_speaker(dialogs, ("SYS:", "USR:")) == "USR:"
    other = ["AGENT: Hello.\nCLIENT: Hi, my order is late.\nAGENT: Sorry.", "AGENT: Hi.\nCLIENT: Bye."] * 50
    assert speaker_tags(other) == ("AGENT:", "CLIENT:") and answering_speaker(other, ("AGENT:", "CLIENT:")) == "CLIENT:"
    # A stray "Note: " line is no speaker, and prose has no tags.
    assert speaker_tags(dialogs + ["Note: the line above was long."]) == ("SYS:", "USR:")
    reviews = [r.text for r in classification_splits(200, 10, 10, 0).train]
    assert speaker_tags(reviews) == ()
    assert speaker_tags(["Time: noon. We met at the gate.\nThe rest of the day was quiet."] * 20) == ()


def _reference_bpe(texts: list[str], vocab_size: int, special: list[str]) -> Tokenizer:
    """The BPE as it was built with a fixed speaker-tag list."""
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=special,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    return tok


def test_customersim_tokenizer_is_unchanged_and_prose_gets_no_speaker_tokens(tmp_path):
    records = generate_customersim(300, 0)
    texts = [redact(r.text, r.spans) for r in records]
    tok = train_bpe_tokenizer(texts, 600)
    reference = _reference_bpe(texts, 600, [PAD, EOS, MASK, "SYS:", "USR:"])
    ours = json.loads(tok.backend_tokenizer.to_str())
    theirs = json.loads(reference.to_str())
    assert ours["model"] == theirs["model"] and ours["added_tokens"] == theirs["added_tokens"]  # vocabulary, merges
    assert tok("SYS: hi\nUSR: yes", add_special_tokens=False)["input_ids"][0] == tok.convert_tokens_to_ids("SYS:")
    cached = cached_bpe_tokenizer(texts, 600, tmp_path)
    again = cached_bpe_tokenizer(texts, 600, tmp_path)  # read back from the cache: the tags stay special
    assert {"SYS:", "USR:"} <= set(cached.all_special_tokens) and {"SYS:", "USR:"} <= set(again.all_special_tokens)

    prose = [r.text for r in classification_splits(300, 10, 10, 0).train]
    prose_tok = train_bpe_tokenizer(prose, 600)
    assert set(prose_tok.all_special_tokens) == {PAD, EOS, MASK}
    assert len(prose_tok("USR: hi", add_special_tokens=False)["input_ids"]) > 2
