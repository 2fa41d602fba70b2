"""``finetune rerank --loss listnet / ranking`` on listwise JSONL files (query, docs, graded
labels, lists of any length): what each loss reads from a list, the batch it makes, the
in-batch negatives ``ranking`` adds, and bad records refused naming the file and line."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.data.tasks.listwise import LIST_FIELDS, RankedList
from bertkit.data.tasks.retrieval import TrainingPair
from bertkit.errors import ConfigError, InputError
from bertkit.tasks import TaskSettings, build_task
from bertkit.tokenizer import BertTokenizer

DEV = [{"query": "a", "passage": "good", "label": 1}, {"query": "a", "passage": "bad", "label": 0}]
LISTS = [
    {"query": "good", "docs": ["the movie was good", "good plot", "bad"], "labels": [2, 1, 0]},
    {"query": "bad", "docs": ["the dog was bad", "a cat"], "labels": [1, 0.0]},
    {"query": "cat", "docs": ["a mat", "the cat", "a cat", "dog"], "labels": [0, 3, 3, 1]},
]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _task(tmp_path: Path, rows: list[dict], loss: str, **settings):
    train = _write(tmp_path / "lists.jsonl", rows)
    dev = _write(tmp_path / "dev.jsonl", DEV)
    return build_task(TaskSettings("rerank", train=train, dev=dev, loss=loss, **settings))


def test_listnet_reads_each_list_as_it_is(tmp_path: Path, tiny_model: Path) -> None:
    adapter, examples, _ = _task(tmp_path, LISTS, "listnet")
    assert examples[2] == RankedList("cat", ("a mat", "the cat", "a cat", "dog"), (0, 3, 3, 1), 3)
    features = adapter.encode(BertTokenizer.from_pretrained(tiny_model), examples, training=True)
    batch = adapter.collate(features, 0, training=True, draws=torch.Generator())
    assert batch["input_ids"].shape[0] == 9  # 3 + 2 + 4 rows: listnet draws no negatives
    inf = -np.inf
    assert batch["labels"].tolist() == [[2, 1, 0, inf], [1, 0, inf, inf], [0, 3, 3, 1]]


def test_ranking_takes_the_first_top_doc_and_the_docs_below(tmp_path: Path) -> None:
    _adapter, examples, _ = _task(tmp_path, LISTS, "ranking")
    assert examples == [
        TrainingPair("good", "the movie was good", ("good plot", "bad")),
        TrainingPair("bad", "the dog was bad", ("a cat",)),
        TrainingPair("cat", "the cat", ("a mat", "dog")),  # "a cat" ties the top: left out
    ]


def test_ranking_adds_in_batch_negatives_to_groups_of_any_length(
    tmp_path: Path, tiny_model: Path
) -> None:
    adapter, examples, _ = _task(tmp_path, LISTS, "ranking", in_batch_negatives=2)
    assert adapter.num_negatives == 2
    tokenizer = BertTokenizer.from_pretrained(tiny_model)
    features = adapter.encode(tokenizer, examples, training=True)
    batch = adapter.collate(features, 0, training=True, draws=torch.Generator().manual_seed(0))
    assert batch["input_ids"].shape[0] == 3 + 2 + 3 + 3 * 2  # own rows, then 2 drawn each
    assert batch["labels"][:, 0].tolist() == [1, 1, 1]  # column 0: the positive
    assert np.isfinite(batch["labels"]).sum(axis=1).tolist() == [5, 4, 5]
    # group "bad"'s drawn rows (each group's own rows, then its drawn ones) pair its query
    # with documents of the other groups
    others = {d for e in (examples[0], examples[2]) for d in (e.positive, *e.negatives)}
    pairs = [("bad", d, 0.0) for d in sorted(others)]
    allowed = [f.input_ids for f in adapter._encode_pairs(tokenizer, pairs)]
    for row in batch["input_ids"][7:9]:  # after "good"'s 3 + 2 rows and its own 2
        assert row[row > 0].tolist() in allowed
    without = adapter.collate(features, 0, training=True)  # no generator: nothing drawn
    assert without["input_ids"].shape[0] == 8


def test_ranking_refuses_a_list_without_a_doc_below_its_top(tmp_path: Path) -> None:
    rows = [*LISTS, {"query": "q", "docs": ["a", "b"], "labels": [1, 1]}]
    with pytest.raises(InputError, match=r"lists\.jsonl:4: every doc has the top label 1"):
        _task(tmp_path, rows, "ranking")
    assert _task(tmp_path, rows, "listnet")[1][3].labels == (1, 1)  # listnet trains on it


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"query": "q", "docs": ["a", "b"], "labels": [1]}, "2 docs but 1 labels"),
        ({"query": "q", "docs": [], "labels": []}, "no docs"),
        ({"query": "q", "docs": ["a"], "labels": ["high"]}, "label 'high' is not a finite number"),
        ({"query": "q", "docs": ["a"], "labels": [True]}, "label True is not a finite number"),
        ({"query": "q", "docs": ["a"], "labels": [float("nan")]}, "label nan is not a finite"),
        ({"query": "q", "docs": ["a", ""], "labels": [1, 0]}, "a doc that is not a non-empty"),
        ({"docs": ["a"], "labels": [1]}, "no query"),
    ],
)
def test_a_bad_record_is_refused_naming_file_and_line(
    tmp_path: Path, record: dict, message: str
) -> None:
    with pytest.raises(InputError, match=r"lists\.jsonl:2: ") as err:
        _task(tmp_path, [LISTS[0], record], "listnet")
    assert message in str(err.value) and '"docs": [TEXT, ...]' in str(err.value)


def test_a_listwise_csv_and_negative_counts_are_refused(tmp_path: Path) -> None:
    train = tmp_path / "lists.csv"
    train.write_text("query,docs,labels\nq,a,1\n", encoding="utf-8")
    dev = _write(tmp_path / "dev.jsonl", DEV)
    with pytest.raises(InputError, match=r"lists\.csv: a listwise file is JSON lines"):
        build_task(TaskSettings("rerank", train=train, dev=dev, loss="listnet"))
    with pytest.raises(ConfigError, match="in-batch negatives must be >= 0, got -1"):
        _task(tmp_path, LISTS, "ranking", in_batch_negatives=-1)
    with pytest.raises(ConfigError, match="--in-batch-negatives applies to --loss ranking only"):
        _task(tmp_path, LISTS, "listnet", in_batch_negatives=2)


def test_the_fields_are_sentence_transformers_listwise_columns() -> None:
    st = pytest.importorskip("sentence_transformers")
    example = inspect.getsource(st.cross_encoder.losses.ListNetLoss)  # its docstring's dataset
    assert all(f'"{name}"' in example for name in LIST_FIELDS)


def test_micro_batches_of_lists_weigh_by_groups_not_rows(tmp_path: Path, tiny_model: Path) -> None:
    """Gradient accumulation and torchrun split a batch's groups; the update's loss stays the
    whole batch's mean over groups when each part weighs by its groups (2 and 1 here; by rows,
    5 and 4, the parts would give another mean)."""
    from bertkit.model.group_losses import group_loss
    from bertkit.training.objectives import TaskLoss

    adapter, examples, _ = _task(tmp_path, LISTS, "listnet")
    features = adapter.encode(BertTokenizer.from_pretrained(tiny_model), examples, training=True)
    logits = torch.randn(9, 1, generator=torch.Generator().manual_seed(0)) * 3  # 3 + 2 + 4 rows

    def loss(part: list, rows: slice) -> tuple[torch.Tensor, list[float]]:
        batch = {k: torch.from_numpy(v) for k, v in adapter.collate(part, 0, True).items()}
        return group_loss("listnet", logits[rows], batch["labels"]), TaskLoss().counts(batch)

    whole, _ = loss(features, slice(0, 9))
    (first, own_1), (rest, own_2) = loss(features[:2], slice(0, 5)), loss(features[2:], slice(5, 9))
    total = [own_1[0] + own_2[0]]
    parts = TaskLoss.weighted(first, own_1, total) + TaskLoss.weighted(rest, own_2, total)
    torch.testing.assert_close(parts, whole, rtol=0, atol=1e-6)
