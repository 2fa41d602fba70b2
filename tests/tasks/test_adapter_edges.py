"""Adapter edges the rooms' mutation pass found untested: a GLUE adapter keeps the window
settings it is given, a Hugging Face classifier's metric follows its label count, a reranker's
scores are the sigmoid of its logits and a label of exactly 0.5 is relevant, a Matryoshka size
of 1 is a size, a training batch of one pair collates, a reranker refuses data with nothing
to rank."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertkit.data.tasks.retrieval import LabelledPair, TrainingPair
from bertkit.errors import ConfigError, InputError
from bertkit.tasks.classification import ClassificationAdapter
from bertkit.tasks.embedding import EmbeddingAdapter
from bertkit.tasks.rerank import RerankAdapter
from bertkit.tasks.saved import adapter_from_hf_config
from bertkit.tasks.windows import WindowConfig


def test_a_glue_adapter_keeps_the_windows_it_is_given() -> None:
    cut = WindowConfig(truncate=True)
    assert ClassificationAdapter.for_glue("SST-2", 64, cut).windows == cut
    assert ClassificationAdapter.for_glue("SST-2").windows == WindowConfig()


@pytest.mark.parametrize(
    ("config", "labels", "metric"),
    [
        ({"num_labels": 1}, [], "pearson_spearman"),
        ({"num_labels": 2}, ["LABEL_0", "LABEL_1"], "accuracy_f1"),
        ({"id2label": {"0": "a", "1": "b", "2": "c"}}, ["a", "b", "c"], "accuracy"),
    ],
)
def test_a_hf_classifiers_metric_follows_its_label_count(config, labels, metric, tmp_path) -> None:
    adapter = adapter_from_hf_config(tmp_path, config)
    assert (adapter.labels, adapter.metric) == (labels, metric)


def test_a_rerankers_scores_are_the_sigmoid_and_a_half_label_is_relevant() -> None:
    pairs = [LabelledPair("q", "half relevant", 0.5, 0), LabelledPair("q", "other", 0.0, 0)]
    scored = RerankAdapter("rerank", "rerank").score(pairs, [], [-1.0, 1.0])
    # the other passage ranks first; the relevant one (label 0.5) second: MRR 1/2
    assert scored.metrics["MRR@10"] == 0.5 and scored.metrics["Recall@1"] == 0.0
    assert scored.metrics["accuracy"] == 0.0  # each logit's sign disagrees with its label
    want = [round(1 / (1 + math.exp(1.0)), 6), round(1 / (1 + math.exp(-1.0)), 6)]
    assert [p["score"] for p in scored.predictions] == want == [0.268941, 0.731059]
    assert np.allclose([p["logit"] for p in scored.predictions], [-1.0, 1.0])


def test_a_reranker_refuses_data_with_nothing_to_rank(tmp_path) -> None:
    """A (query, positive) pairs file without negatives reads as relevant pairs only: as dev,
    every query's one pair ranks first (MRR@10 1 for any model, so selection picks nothing);
    as training, every target is 1. Both are refused naming the file; one query with both
    labels makes a dev set rankable."""
    adapter, path = RerankAdapter("rerank", "rerank"), tmp_path / "dev_pairs.jsonl"
    positives = [LabelledPair("q1", "a", 1.0, 0), LabelledPair("q2", "b", 1.0, 1)]
    with pytest.raises(InputError, match=r"dev_pairs.jsonl: no query has both a relevant"):
        adapter.require_labelled(path, "dev", positives)
    with pytest.raises(InputError, match=r"dev_pairs.jsonl: every pair has label 1"):
        adapter.require_labelled(path, "train", positives)
    apart = [*positives, LabelledPair("q3", "c", 0.0, 2)]  # a negative, but of another query
    with pytest.raises(InputError, match="no query has both"):
        adapter.require_labelled(path, "dev", apart)
    assert adapter.require_labelled(path, "train", apart) == apart
    ranked = [*apart, LabelledPair("q1", "d", 0.0, 0)]
    assert adapter.require_labelled(path, "dev", ranked) == ranked


def test_a_matryoshka_size_of_one_is_a_size_and_zero_is_not() -> None:
    assert EmbeddingAdapter("embeddings", "e", matryoshka_dims=[1, 8]).matryoshka_dims == [8, 1]
    with pytest.raises(ConfigError, match="Matryoshka dimensions must be positive"):
        EmbeddingAdapter("embeddings", "e", matryoshka_dims=[0, 8])


def test_a_training_batch_of_one_pair_collates_column_by_column(tiny_tok) -> None:
    """The last batch of an epoch (or a training set) can hold one pair: its rows are still the
    query, its positive and its negative, and its label is itself."""
    adapter = EmbeddingAdapter("embeddings", "e", max_seq_length=16)
    pairs = [TrainingPair("a", "b bxy", ("c d a",)), TrainingPair("d", "a", ("b",))]
    one = adapter.collate(adapter.encode(tiny_tok, pairs[:1], training=True), 0, training=True)
    query, positive, negative = [2, 5, 3, 0, 0, 0], [2, 6, 6, 9, 10, 3], [2, 7, 8, 5, 3, 0]
    assert one["input_ids"].tolist() == [query, positive, negative]
    assert one["labels"].tolist() == [0]
    two = adapter.collate(adapter.encode(tiny_tok, pairs, training=True), 0, training=True)
    # column by column: the two queries, the two positives, the two negatives
    assert two["input_ids"].tolist() == [
        query,
        [2, 8, 3, 0, 0, 0],
        positive,
        [2, 5, 3, 0, 0, 0],
        negative,
        [2, 6, 3, 0, 0, 0],
    ]
    assert two["labels"].tolist() == [0, 1]


def test_a_family_that_reads_whole_files_reads_when_the_first_example_is_pulled(tmp_path) -> None:
    """``predict`` into a folder refuses a SQuAD model before it reads the JSON (a corpus-sized
    file was parsed whole first, then refused)."""
    from bertkit.errors import InputError
    from bertkit.tasks.span_qa import SquadAdapter

    examples = SquadAdapter(family="squad", name="squad").iter_read(tmp_path / "missing.json")
    with pytest.raises(InputError, match=r"missing\.json"):
        next(examples)


@pytest.mark.parametrize("task", ["CoLA", "SST-2"])
def test_a_compressed_glue_tsv_reads_like_the_plain_one(task, tmp_path) -> None:
    """``predict``/``evaluate`` of a GLUE model on ``dev.tsv.gz``: read as the GLUE TSV (CoLA's
    has no header, so no other reader could take it)."""
    import gzip
    from pathlib import Path

    plain = Path(__file__).parent.parent / "fixtures" / "task_glue" / task / "dev.tsv"
    packed = tmp_path / "dev.tsv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    adapter = ClassificationAdapter.for_glue(task)
    assert adapter.read(packed) == adapter.read(plain)
    assert list(adapter.iter_read(packed)) == adapter.read(plain)


def test_a_file_without_a_text_column_names_each_candidate_once(tmp_path) -> None:
    """The model's own column "text" is also a common name: it was listed twice ("expected text
    fields text or text or sentence or text_a")."""
    from bertkit.errors import InputError

    path = tmp_path / "x.csv"
    path.write_text("review,label\ngood,a\n")
    adapter = ClassificationAdapter("classify", "x", 16, labels=["a"], columns={"text": "text"})
    with pytest.raises(InputError) as info:
        adapter.read(path)
    assert str(info.value) == (
        f"{path}:1: expected text fields text or sentence or text_a; "
        "the file has ['review', 'label']"
    )


def test_a_compressed_training_file_names_the_task_like_the_plain_one(tmp_path) -> None:
    """The task's name (the model's ``name``, the logs) is the training file's stem: ``train``
    for ``train.csv.gz`` too, not ``train.csv``."""
    import gzip

    packed = tmp_path / "train.csv.gz"
    packed.write_bytes(gzip.compress(b"text,label\nthe cat,a\nthe dog,b\n"))
    cols = {"text": "text", "text_pair": None, "label": "label"}
    adapter, examples = ClassificationAdapter.for_files(packed, cols)
    assert adapter.name == "train" and adapter.labels == ["a", "b"] and len(examples) == 2


def test_each_adapter_says_what_an_unlabelled_example_lacks(tmp_path) -> None:
    """The adapter, the home of what its task is, decides whether an example can be trained on
    or scored (build_task refuses a training or dev file otherwise, naming the file and line)."""
    from bertkit.data.tasks.conll import TaggedSentence
    from bertkit.data.tasks.glue import ClassificationExample
    from bertkit.data.tasks.squad import SquadAnswer, SquadExample
    from bertkit.data.tasks.swag import MultipleChoiceExample
    from bertkit.errors import InputError
    from bertkit.tasks.multiple_choice import MultipleChoiceAdapter
    from bertkit.tasks.span_qa import SquadAdapter
    from bertkit.tasks.tagging import TaggingAdapter

    glue = ClassificationAdapter.for_glue("SST-2")
    row = ClassificationExample("g1", "a film", None, None, line=4)
    assert glue.missing_label(row) == "a label"
    assert glue.missing_label(ClassificationExample("g1", "a film", None, 1)) is None
    swag = MultipleChoiceAdapter("swag", "swag")
    assert swag.missing_label(MultipleChoiceExample("s", "c", "s", ("a", "b"), None)) == "a label"
    ner = TaggingAdapter("ner", "conll")
    assert ner.missing_label(TaggedSentence(("EU", "rejects"), (), line=2)) == "tags"
    assert ner.missing_label(TaggedSentence(("EU",), ("B-ORG",))) is None
    squad = SquadAdapter("squad", "squad1")
    qa = SquadExample("q", "Where?", "Paris", (SquadAnswer("Paris", 0),))
    assert squad.missing_label(qa) is None
    path = tmp_path / "dev.tsv"
    with pytest.raises(InputError) as info:
        glue.require_labelled(path, "dev", [row])
    assert str(info.value) == (
        f"{path}:4: expected labelled dev data, got an example without a label"
    )
    with pytest.raises(InputError, match=r"dev\.tsv: no examples \(expected labelled train data"):
        ner.require_labelled(path, "train", [])
    assert squad.require_labelled(path, "dev", [qa]) == [qa]


@pytest.mark.parametrize(
    ("loss", "option", "value", "owner"),
    [
        ("ranking", "temperature", 0.05, "distill-kl"),
        ("ranking", "teacher_temperature", 2.0, "distill-kl"),
        ("margin-mse", "student_temperature", 0.5, "distill-kl"),
        ("margin-mse", "scale", 10.0, "ranking"),
        ("distill-kl", "scale", 30.0, "ranking"),
    ],
)
def test_a_loss_option_the_loss_ignores_is_refused(loss, option, value, owner) -> None:
    with pytest.raises(
        ConfigError,
        match=f"{option} is a {owner} loss option; the {loss} loss does not use it "
        rf"\(got {value}\)",
    ):
        EmbeddingAdapter("embeddings", "x", loss=loss, **{option: value})
    EmbeddingAdapter("embeddings", "x", loss=owner, **{option: value})  # its own loss reads it


def test_the_finetune_defaults_of_the_loss_options_are_the_adapters() -> None:
    """The CLI's defaults (TaskSettings fields) are what the adapter takes for unset, so a
    command that sets no loss option is never refused for one (each loss, defaults only)."""
    import dataclasses

    from bertkit.tasks import TaskSettings
    from bertkit.tasks.embedding import LOSS_OPTIONS, LOSSES

    cli = {f.name: f.default for f in dataclasses.fields(TaskSettings)}
    adapter = {f.name: f.default for f in dataclasses.fields(EmbeddingAdapter)}
    for name in LOSS_OPTIONS:
        assert cli[name] == adapter[name], name
    for loss in LOSSES:
        EmbeddingAdapter("embeddings", "x", loss=loss, **{n: cli[n] for n in LOSS_OPTIONS})


@pytest.mark.parametrize("option", ["temperature", "student_temperature", "teacher_temperature"])
@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_distill_kl_temperatures_must_be_positive_and_finite(option, value) -> None:
    with pytest.raises(ConfigError, match=f"{option} must be positive and finite"):
        EmbeddingAdapter("embeddings", "x", loss="distill-kl", **{option: value})


@pytest.mark.parametrize(
    ("name", "text", "got"),
    [
        ("dev.csv", "text,lbl\ngood film,1\n", "text, lbl"),
        ("dev.jsonl", '{"text": "good film"}\n', "text"),
        ("dev.tsv", "index\tsentence\n0\tgood film\n", "index, sentence"),  # GLUE's test.tsv
    ],
)
def test_a_dev_file_without_a_label_column_is_named_by_its_header(
    name, text, got, tmp_path
) -> None:
    """A dev file with no label column used to be refused at its first example (``dev.csv:2:
    expected labelled dev data, got an example without a label``), where the training file's
    reader names the header: the header line and the columns looked for are named."""
    from bertkit.data.tasks.custom import read_classification
    from bertkit.errors import InputError

    path = tmp_path / name
    path.write_text(text)
    adapter = ClassificationAdapter(
        "classify", "custom", columns={"text": "text"}, labels=["0", "1"]
    )
    if name == "dev.tsv":
        adapter = ClassificationAdapter.for_glue("SST-2")
    examples = adapter.read(path, "dev")
    assert examples[0].label is None
    with pytest.raises(InputError) as info:
        adapter.require_labelled(path, "dev", examples)
    assert str(info.value) == (
        f"{path}:1: expected labelled dev data, with a label column (label or score); got {got}"
    )
    # a labelled file passes
    labelled = tmp_path / "ok.csv"
    labelled.write_text("text,label\ngood film,1\n")
    rows = read_classification(labelled, text="text", labels=["0", "1"]).examples
    assert adapter.require_labelled(labelled, "dev", rows) == rows
