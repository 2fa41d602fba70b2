"""A fine-tuned model's folder (``save_model_dir``): every file renamed into place with config.json
last, a bi-encoder written as a sentence-transformers folder (its module folders, no task file, a
stale one removed), nothing of the hidden work folder left behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.config import BertConfig
from bertkit.errors import BertkitError, CheckpointError
from bertkit.interop import load_pretrained, save_pretrained
from bertkit.model import BertModel
from bertkit.model.contrastive import BiEncoder
from bertkit.tasks import ClassificationAdapter
from bertkit.tasks.base import TASK_FILE
from bertkit.tasks.embedding import EmbeddingAdapter
from bertkit.tokenizer import BertTokenizer
from bertkit.training import model_dir


@pytest.fixture
def base(tmp_path: Path) -> tuple[Path, BertTokenizer]:
    vocab = tmp_path / "vocab_src.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    tok = BertTokenizer(vocab)
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    save_pretrained(BertModel(config), tmp_path / "base", tok)
    return tmp_path / "base", tok


@pytest.fixture
def renames(monkeypatch) -> list[tuple[str, Path]]:
    """(source name, destination) of every rename save_model_dir makes into place (not those of
    the files written atomically into its hidden work folder)."""
    done: list[tuple[str, Path]] = []
    real = os.replace

    def replace(src, dst) -> None:
        if not any(part.startswith(".") for part in Path(dst).parts):
            done.append((Path(src).name, Path(dst)))
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    return done


CLASSIFIER_FILES = [
    "bertkit_task.json",
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
]
"""A fine-tuned classifier's folder, in name order."""


def files(folder: Path) -> list[str]:
    """The model's files (the job's unfinished mark aside: its own test below)."""
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and p.name != model_dir.UNFINISHED_FILE
    )


def test_a_classifier_is_renamed_into_place_config_last(base, renames, tmp_path) -> None:
    path, tok = base
    adapter = ClassificationAdapter("glue", "SST-2", 32, labels=["0", "1"], metric="accuracy")
    model = load_pretrained(path, adapter.head_class, **adapter.config_overrides())
    out = tmp_path / "out"
    model_dir.save_model_dir(model, adapter, tok, out)
    written = CLASSIFIER_FILES
    assert files(out) == written  # the hidden work folder is gone
    assert (out / model_dir.UNFINISHED_FILE).is_file()  # until the job's metrics.json
    # each file is renamed from the work folder to the same name in the output; config.json last,
    # so that a folder whose config.json is new has every other new file too
    assert [str(dst.relative_to(out)) for _, dst in renames] == [
        *(n for n in written if n != "config.json"),
        "config.json",
    ]
    assert all(src == dst.name for src, dst in renames)
    again = load_pretrained(out, adapter.head_class)
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in model.state_dict().items())


def test_a_bi_encoder_is_a_sentence_transformers_folder(base, renames, tmp_path) -> None:
    path, tok = base
    adapter = EmbeddingAdapter("embeddings", "e", max_seq_length=16, normalize=True)
    model = BiEncoder(load_pretrained(path, "BertModel"), adapter.pooling)
    out = tmp_path / "out"
    out.mkdir()
    (out / TASK_FILE).write_text("{}")  # a classifier saved here before
    model_dir.save_model_dir(model, adapter, tok, out)
    listed = files(out)
    assert TASK_FILE not in listed
    assert "1_Pooling/config.json" in listed
    assert {"config.json", "model.safetensors", "modules.json", "vocab.txt"} <= set(listed)
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [model_dir.UNFINISHED_FILE]
    moved = [(src, str(dst.relative_to(out))) for src, dst in renames]
    assert moved[-1] == ("config.json", "config.json")
    assert ("config.json", "1_Pooling/config.json") in moved  # a module folder's file, in place


def test_a_classifier_saved_over_an_embedder_drops_its_sentence_files(base, tmp_path) -> None:
    """modules.json left beside a classifier would make sentence-transformers (and bertkit's
    pipeline, by its task file's absence elsewhere) read the folder as the old embedder's."""
    from bertkit.inference import Embedder
    from bertkit.inference.pipeline import task_of

    path, tok = base
    out = tmp_path / "out"
    model_dir.save_model_dir(
        BiEncoder(load_pretrained(path, "BertModel"), "mean"),
        EmbeddingAdapter("embeddings", "e", max_seq_length=16, normalize=True, matryoshka_dims=[8]),
        tok,
        out,
    )
    assert {"modules.json", "bertkit_embedding.json", "1_Pooling/config.json"} <= set(files(out))
    adapter = ClassificationAdapter("glue", "SST-2", 32, labels=["0", "1"], metric="accuracy")
    model = load_pretrained(path, adapter.head_class, **adapter.config_overrides())
    model_dir.save_model_dir(model, adapter, tok, out)
    assert files(out) == CLASSIFIER_FILES
    assert task_of(out) == "text-classification"
    Embedder.load(path).save(out)  # and back: the classifier's task file goes
    assert TASK_FILE not in files(out) and "modules.json" in files(out)
    assert task_of(out) == "feature-extraction"


def test_a_crash_between_the_renames_never_leaves_a_folder_that_loads(
    base, tmp_path, monkeypatch
) -> None:
    """A new model's files renamed in beside the old config.json would load as a model that was
    never trained: the old config.json goes first, so such a folder is refused instead."""
    path, tok = base
    adapter = ClassificationAdapter("glue", "SST-2", 32, labels=["0", "1"], metric="accuracy")
    out = tmp_path / "out"
    model_dir.save_model_dir(
        load_pretrained(path, adapter.head_class, **adapter.config_overrides()), adapter, tok, out
    )
    real = os.replace

    def replace(src, dst) -> None:  # the kill comes after the first renames into the output
        if Path(dst) == out / "model.safetensors":
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    torch.manual_seed(1)
    second = load_pretrained(path, adapter.head_class, **adapter.config_overrides())
    with pytest.raises((OSError, BertkitError), match="Input/output error"):
        model_dir.save_model_dir(second, adapter, tok, out)
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        load_pretrained(out, adapter.head_class)
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [model_dir.UNFINISHED_FILE]


def test_check_output_free(tmp_path: Path) -> None:
    """Free: absent, empty, an unfinished job's folder, or anything with overwrite; refused: a
    finished model, any other model, any other non-empty folder (each named, with the flag)."""
    out = tmp_path / "out"
    model_dir.check_output_free(out)
    out.mkdir()
    model_dir.check_output_free(out)
    (out / "config.json").write_text("{}")
    with pytest.raises(BertkitError, match=r"out: already holds a model \(pass --overwrite"):
        model_dir.check_output_free(out)
    (out / model_dir.METRICS_FILE).write_text("{}")
    with pytest.raises(BertkitError, match="out: already holds a fine-tuned model"):
        model_dir.check_output_free(out)
    model_dir.check_output_free(out, overwrite=True)
    (out / model_dir.UNFINISHED_FILE).write_text("")
    model_dir.check_output_free(out)  # an interrupted job's: its rerun replaces it
    model_dir.mark_finished(out)
    assert not (out / model_dir.UNFINISHED_FILE).exists()
    (out / "config.json").unlink()
    (out / model_dir.METRICS_FILE).unlink()
    (out / "x.txt").write_text("")
    with pytest.raises(BertkitError, match="out: exists and is not empty"):
        model_dir.check_output_free(out)


def test_an_unfinished_folder_is_free_to_its_own_job_only(tmp_path: Path) -> None:
    """The mark names its job: the same job's rerun takes the folder back, another is refused
    (as a finished model's folder is) unless overwrite; a mark without a job line, as written
    before it had one, is any job's. record_kept keeps the job line."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text("{}")
    mark = out / model_dir.UNFINISHED_FILE
    mark.write_text("lr 5e-05 seed 42 epoch 1, dev f1 0.8122\n")  # the old layout
    model_dir.check_output_free(out, job="ner train")
    assert "(lr 5e-05 seed 42 epoch 1, dev f1 0.8122)" in model_dir.unfinished_note(out)

    mark.write_text("job: glue SST-2\n")
    model_dir.record_kept(out, "lr 2e-05 seed 1 epoch 2, dev accuracy 0.9000")
    assert (
        mark.read_text() == "job: glue SST-2\nkept: lr 2e-05 seed 1 epoch 2, dev accuracy 0.9000\n"
    )
    note = model_dir.unfinished_model_note(out)
    assert note.endswith(
        "(lr 2e-05 seed 1 epoch 2, dev accuracy 0.9000), not the selection's result"
    )
    model_dir.check_output_free(out, job="glue SST-2")
    model_dir.check_output_free(out)  # the job not yet known: checked again once it is
    model_dir.check_output_free(out, overwrite=True, job="glue mrpc")
    with pytest.raises(
        BertkitError,
        match=r"out: holds an interrupted 'glue SST-2' job's model, "
        r"not this 'glue mrpc' job's \(pass --overwrite",
    ):
        model_dir.check_output_free(out, job="glue mrpc")


def test_an_unfinished_folder_is_free_to_its_own_training_file_only(
    tmp_path: Path, monkeypatch
) -> None:
    """Two training files with the same stem are one job name (``classify train``): the mark's
    data line, the resolved file, tells them apart; a mark without one is its job's on any file."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text("{}")
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "train.jsonl").write_text("")
    a, b = tmp_path / "a" / "train.jsonl", tmp_path / "b" / "train.jsonl"
    model_dir._mark_unfinished(out, "classify train", model_dir.training_data(a))
    model_dir.record_kept(out, "lr 2e-05 seed 1 epoch 2, dev accuracy 0.9000")
    mark = out / model_dir.UNFINISHED_FILE
    assert mark.read_text() == (
        f"job: classify train\ndata: {a.resolve()}\n"
        "kept: lr 2e-05 seed 1 epoch 2, dev accuracy 0.9000\n"
    )
    monkeypatch.chdir(tmp_path / "b")
    model_dir.check_output_free(
        out, job="classify train", train_data=model_dir.training_data(Path("../a/train.jsonl"))
    )
    model_dir.check_output_free(out, job="classify train")  # a caller naming no data
    with pytest.raises(
        BertkitError,
        match=rf"out: holds an interrupted 'classify train' job's model on {a.resolve()}, "
        rf"not this one's on {b.resolve()} \(pass --overwrite",
    ):
        model_dir.check_output_free(
            out, job="classify train", train_data=model_dir.training_data("train.jsonl")
        )
    with pytest.raises(BertkitError, match=r"interrupted 'classify train' job's model, not this"):
        model_dir.check_output_free(out, job="ner train", train_data=str(a))
    model_dir.check_output_free(out, True, "classify train", str(b))
    # the same job on another file takes a fresh mark (its kept model is not yet saved)
    model_dir._mark_unfinished(out, "classify train", model_dir.training_data(b))
    assert mark.read_text() == f"job: classify train\ndata: {b.resolve()}\n"

    mark.write_text("job: classify train\nkept: lr 2e-05 seed 1 epoch 2\n")  # before data:
    model_dir.check_output_free(out, job="classify train", train_data=str(b))


def test_examples_given_in_memory_are_known_by_their_content() -> None:
    """A job given its examples in memory has no file: its mark names their count and the
    sha256 of their canonical JSON, so the same examples built again are the same data, other
    ones (another label, one more, another order) are not; numpy values read as their lists."""
    from bertkit.data.tasks.glue import ClassificationExample

    def examples(label: int = 1) -> list[ClassificationExample]:
        return [
            ClassificationExample("a", "good film", None, label),
            ClassificationExample("b", "bad", None, 0),
        ]

    name = model_dir.training_data(examples())
    assert name == model_dir.training_data(examples())
    assert name.startswith("2 examples in memory, sha256 ") and len(name.split()[-1]) == 64
    assert model_dir.training_data(examples(0)) != name
    assert model_dir.training_data(examples()[::-1]) != name
    assert model_dir.training_data(examples()[:1]).startswith("1 example in memory, sha256 ")
    assert model_dir.training_data([{"scores": np.array([0.5, 1.0])}]) == model_dir.training_data(
        [{"scores": [0.5, 1.0]}]
    )
