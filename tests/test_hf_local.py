"""`data.source: hf` without the hub: `save_to_disk` folders and Parquet / JSONL files made here, split names and
text fields as configured, bad input as one line; and trials whose pretrained model and tokenizer are loaded from a
local folder (`model.name_or_path`, `tokenizer.name_or_path`)."""

from __future__ import annotations

import re
from pathlib import Path

import datasets
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, RobertaConfig, RobertaForSequenceClassification

from sdp_core.config import DataConfig, parse_model
from sdp_core.config.trial import TrialConfig
from sdp_core.data.classification import generate_reviews
from sdp_core.data.customersim import generate_customersim
from sdp_core.data.splits import hf_split_names, load_splits
from sdp_core.errors import DataError
from sdp_core.text.tokenizer import train_bpe_tokenizer
from sdp_core.trial import run_trial
from tests.conftest import run_main

datasets.disable_progress_bars()
QUESTION = "Is this review positive?"


def review_columns(n: int, seed: int) -> dict[str, list]:
    """A QNLI-like pair task: a fixed question, the review as the sentence, its sentiment as the label."""
    reviews = generate_reviews(n, seed)
    return {"question": [QUESTION] * n, "sentence": [r.text for r in reviews], "label": [r.label for r in reviews],
            "idx": list(range(n))}


def hf_data(path: Path, **fields) -> DataConfig:
    return DataConfig(source="hf", hf_name=str(path), **fields)


# ------------------------------------------------------------------------------------------- loading


def test_save_to_disk_dataset_dict_keeps_its_splits_and_joins_text_fields(tmp_path):
    datasets.DatasetDict({split: datasets.Dataset.from_dict(review_columns(n, seed)) for split, n, seed in
                          (("train", 30, 0), ("validation", 8, 1), ("test", 6, 2))}).save_to_disk(tmp_path / "qnli")
    splits = load_splits(hf_data(tmp_path / "qnli", text_fields=["question", "sentence"]), seed=0)
    assert [len(s) for s in (splits.train, splits.validation, splits.test)] == [30, 8, 6]
    expected = review_columns(6, 2)
    assert [r.text for r in splits.test] == [f"{QUESTION}\n{s}" for s in expected["sentence"]]
    assert [r.label for r in splits.test] == expected["label"]


def test_a_single_dataset_gets_validation_and_test_held_out_of_train(tmp_path):
    texts = [r.text for r in generate_customersim(50, 0)]
    datasets.Dataset.from_dict({"text": texts}).save_to_disk(tmp_path / "dialogs")
    splits = load_splits(hf_data(tmp_path / "dialogs", validation_fraction=0.2), seed=3)
    assert [len(s) for s in (splits.train, splits.validation, splits.test)] == [30, 10, 10]
    assert sorted(r.text for r in [*splits.train, *splits.validation, *splits.test]) == sorted(texts)
    assert all(r.label is None for r in splits.train)  # a language-model corpus: no label column


def test_parquet_shards_and_a_jsonl_file(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    for name, (n, seed) in {"train-00000-of-00002": (20, 0), "train-00001-of-00002": (20, 1),
                            "test-00000-of-00001": (10, 2)}.items():
        datasets.Dataset.from_dict(review_columns(n, seed)).to_parquet(folder / f"{name}.parquet")
    splits = load_splits(hf_data(folder, text_fields=["sentence"]), seed=0)  # no validation split: held out
    assert [len(s) for s in (splits.train, splits.validation, splits.test)] == [36, 4, 10]

    datasets.Dataset.from_dict(review_columns(20, 0)).to_json(tmp_path / "reviews.jsonl")
    splits = load_splits(hf_data(tmp_path / "reviews.jsonl", text_fields=["sentence"]), seed=0)
    assert [len(s) for s in (splits.train, splits.validation, splits.test)] == [16, 2, 2]


def test_split_names_are_configurable_and_glue_hub_names_test_on_validation(tmp_path):
    datasets.DatasetDict({split: datasets.Dataset.from_dict(review_columns(20, i)) for i, split in
                          enumerate(("train", "validation", "test"))}).save_to_disk(tmp_path / "glue")
    # GLUE as exported: the test split has no labels, so validation is the test set and validation is held out.
    cfg = hf_data(tmp_path / "glue", text_fields=["sentence"], splits={"test": "validation"})
    splits = load_splits(cfg, seed=0)
    assert [r.text for r in splits.test] == review_columns(20, 1)["sentence"]
    assert len(splits.validation) == 2 and len(splits.train) == 18

    glue = ["train", "validation", "test"]
    assert hf_split_names(DataConfig(source="hf", hf_name="glue/sst2"), glue) == ("train", None, "validation")
    mnli = ["train", "validation_matched", "validation_mismatched", "test_matched"]
    assert hf_split_names(DataConfig(source="hf", hf_name="glue/mnli"), mnli) == ("train", None, "validation_matched")
    assert hf_split_names(DataConfig(source="hf", hf_name="wikitext-2-raw-v1"), glue) == tuple(glue)


def test_an_existing_relative_path_is_made_absolute(tmp_path, monkeypatch):
    datasets.Dataset.from_dict({"text": ["a", "b"]}).save_to_disk(tmp_path / "tiny")
    monkeypatch.chdir(tmp_path)
    assert DataConfig(source="hf", hf_name="tiny").hf_name == str(tmp_path / "tiny")
    assert DataConfig(source="hf", hf_name="glue/sst2").hf_name == "glue/sst2"  # a hub name stays as it is


@pytest.mark.parametrize("case, problem", [
    ("missing folder", "dataset folder or file not found"),
    ("missing field", "no text column 'premise' (columns: question, sentence, label, idx)"),
    ("missing split", "no split 'dev' (the dataset has train, test)"),
    ("blank split", "no records (the split is empty or every text is blank)"),
    ("split of no rows", "cannot load the dataset"),  # `datasets` itself cannot load a saved split of no rows
    ("non-text column", "row 0: column 'idx' holds int, not text"),
    ("not a dataset", "not a dataset: expected a save_to_disk folder or a file ending in"),
])
def test_bad_local_data_is_one_line_and_exit_2(tmp_path, case, problem):
    path = tmp_path / "data"
    fields = ["sentence"]
    if case == "not a dataset":
        path = tmp_path / "data.csv"
        path.write_text("sentence,label\nfine,1\n")
    elif case != "missing folder":
        test = review_columns(0 if case == "split of no rows" else 5, 1)
        test["sentence"] = [" \n"] * 5 if case == "blank split" else test["sentence"]
        datasets.DatasetDict({"train": datasets.Dataset.from_dict(review_columns(20, 0)),
                              "test": datasets.Dataset.from_dict(test)}).save_to_disk(path)
    fields = {"missing field": ["premise"], "non-text column": ["idx"]}.get(case, fields)
    cfg = hf_data(path, text_fields=fields, splits={"validation": "dev"} if case == "missing split" else {})
    with pytest.raises(DataError, match="^" + re.escape(str(path))) as raised:
        load_splits(cfg, seed=0)
    assert problem in raised.value.message

    args = ["data.source=hf", f"data.hf_name={path}", f"data.text_fields={fields}", "model.arch=roberta",
            "detector.policy=phone"]
    args += ["data.splits.validation=dev"] if case == "missing split" else []
    result = run_main("trial", *[a for arg in args for a in ("--set", arg)], "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and problem in result.stderr, result.stderr


# ------------------------------------------------------------------------------- local pretrained models


def make_pretrained(root: Path) -> dict[str, Path]:
    """Tiny 'pretrained' GPT-2 and RoBERTa folders under `root`, each with its tokenizer: what `save_pretrained` of
    a hub model leaves, made here from a BPE tokenizer trained on generated text."""
    texts = [r.text for r in generate_customersim(200, 5)] + [r.text for r in generate_reviews(200, 5)]
    tokenizer = train_bpe_tokenizer(texts, vocab_size=400)
    vocab, pad = len(tokenizer), tokenizer.pad_token_id
    models = {
        "gpt2": GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=128, n_layer=1, n_embd=32, n_head=2)),
        "roberta": RobertaForSequenceClassification(RobertaConfig(
            vocab_size=vocab, max_position_embeddings=128 + pad + 1, pad_token_id=pad, num_hidden_layers=1,
            hidden_size=32, num_attention_heads=2, intermediate_size=64, type_vocab_size=1, num_labels=2)),
    }
    for name, model in models.items():
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    return {name: root / name for name in models}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> dict[str, Path]:
    return make_pretrained(tmp_path_factory.mktemp("pretrained"))


def local_trial(model_dir: Path, arch: str, hf_name: Path, mechanism: str, **data) -> TrialConfig:
    return parse_model(TrialConfig, {
        "name": f"local-{arch}", "seed": 0,
        "data": {"source": "hf", "hf_name": str(hf_name), "max_length": 64, **data},
        "detector": {"policy": "phone,order_number,tracking_number"},
        "tokenizer": {"kind": "pretrained", "name_or_path": str(model_dir)},
        "model": {"arch": arch, "name_or_path": str(model_dir)},
        "mechanism": {"name": mechanism},
        "training": {"batch_size": 16, "epochs": 1, "max_steps": 3, "learning_rate": 2e-3},
        "evaluation": {"exposure": False, "mia": False},
    })


@pytest.mark.slow
def test_gpt2_trial_from_a_local_model_and_a_save_to_disk_dataset(pretrained, tmp_path):
    splits = {split: datasets.Dataset.from_dict({"text": [r.text for r in generate_customersim(n, seed)]})
              for split, n, seed in (("train", 160, 0), ("validation", 30, 1), ("test", 30, 2))}
    datasets.DatasetDict(splits).save_to_disk(tmp_path / "dialogs")
    result = run_trial(local_trial(pretrained["gpt2"], "gpt2", tmp_path / "dialogs", "jft"), tmp_path / "run")
    assert result.state == "finished", result.error
    assert result.detector["train_records"] == 160
    assert result.metrics["val_perplexity"] > 1 and result.privacy["notion"] == "SDP"
    assert (tmp_path / "run" / "model").is_dir()


@pytest.mark.slow
def test_roberta_trial_from_a_local_model_and_parquet_files(pretrained, tmp_path):
    folder = tmp_path / "qnli"
    folder.mkdir()
    for split, n, seed in (("train", 160, 0), ("validation", 40, 1)):
        datasets.Dataset.from_dict(review_columns(n, seed)).to_parquet(folder / f"{split}-00000-of-00001.parquet")
    cfg = local_trial(pretrained["roberta"], "roberta", folder, "dpsgd", text_fields=["question", "sentence"],
                      splits={"test": "validation"})
    result = run_trial(cfg, tmp_path / "run")
    assert result.state == "finished", result.error
    assert result.detector["train_records"] == 144  # 10 % of train held out for validation
    assert 0 <= result.metrics["test_accuracy"] <= 1 and result.privacy["notion"] == "DP"


def test_a_pretrained_gpt2_runs_gpt2s_gelu_as_the_fused_kernel_with_the_same_logits(pretrained):
    from sdp_core.models.gpt2 import build_gpt2

    reference = GPT2LMHeadModel.from_pretrained(pretrained["gpt2"]).eval()  # HF's own gelu_new
    assert reference.config.activation_function == "gelu_new"
    ours = build_gpt2(None, str(pretrained["gpt2"]), reference.config.vocab_size, 64, 0.0).eval()
    assert ours.model.config.activation_function == "gelu_pytorch_tanh"
    ids = torch.randint(0, reference.config.vocab_size, (3, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), reference(ids).logits, rtol=1e-5, atol=1e-5)
