"""``finetune rerank --loss ranking / listnet``: groups read from n-tuple files and kept whole
in a batch; labelled pairs and files without negatives refused, naming the file and layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.errors import ConfigError, InputError
from bertkit.tasks import TaskSettings, build_task
from bertkit.tasks.base import GroupedAdapter, GroupFeature
from bertkit.tasks.embedding import EmbeddingAdapter
from bertkit.tasks.features import EncodedInput
from bertkit.tasks.rerank import RerankAdapter, RerankGroup
from bertkit.tasks.sparse import SparseAdapter
from bertkit.tokenizer import BertTokenizer


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


DEV = [{"query": "a", "passage": "good", "label": 1}, {"query": "a", "passage": "bad", "label": 0}]


def _task(tmp_path: Path, train: list[dict], loss: str | None):
    return build_task(
        TaskSettings(
            "rerank",
            train=_write(tmp_path / "train.jsonl", train),
            dev=_write(tmp_path / "dev.jsonl", DEV),
            loss=loss,
        )
    )


def test_groups_stay_whole_in_a_batch(tmp_path: Path, tiny_model: Path) -> None:
    train = [
        {"query": "good", "positive": "the movie was good", "negatives": ["bad", "the cat"]},
        {"query": "bad", "positive": "the dog was bad", "negatives": ["good", "a mat"]},
    ]
    adapter, examples, dev = _task(tmp_path, train, "ranking")
    tokenizer = BertTokenizer.from_pretrained(tiny_model)
    features = adapter.encode(tokenizer, examples, training=True)
    assert [type(f) for f in features] == [RerankGroup, RerankGroup]
    batch = adapter.collate(features[::-1], 0, training=True)
    # the rows of the second group first, then the first's: (query, passage) pairs in order
    assert batch["input_ids"].shape[0] == 6
    assert batch["labels"].tolist() == [[1.0, 0.0, 0.0]] * 2
    pair = adapter.encode(tokenizer, [dev["dev"][0]], training=False)[0]  # dev: plain pairs
    assert not isinstance(pair, GroupFeature)
    expected = adapter._encode_pairs(tokenizer, [("bad", "good", 0.0)])[0].input_ids
    row = batch["input_ids"][1].tolist()[: len(expected)]
    assert row == expected  # group "bad", its first negative


def test_bce_stays_the_default_and_reads_triples_as_pairs(tmp_path: Path) -> None:
    train = [{"query": "q", "positive": "p", "negative": "n"}]
    adapter, examples, _ = _task(tmp_path, train, None)
    assert adapter.loss == "bce" and adapter.group_loss is None
    assert [e.label for e in examples] == [1.0, 0.0]


@pytest.mark.parametrize("loss", ["ranking", "listnet"])
def test_labelled_pairs_are_refused_for_a_group_loss(tmp_path: Path, loss: str) -> None:
    with pytest.raises(InputError, match=r"train\.jsonl.*label field.*have no groups") as err:
        _task(tmp_path, DEV, loss)
    assert f"--loss {loss} trains on groups" in str(err.value)
    assert "hard negatives" in str(err.value) and "--loss bce" in str(err.value)


def test_pairs_without_negatives_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"train\.jsonl.*no negatives; --loss ranking"):
        _task(tmp_path, [{"query": "q", "positive": "p"}], "ranking")


def test_an_unknown_loss_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="bce, ranking, listnet"):
        _task(tmp_path, [{"query": "q", "positive": "p", "negative": "n"}], "lambda")


@pytest.mark.parametrize(
    "adapter",
    [
        RerankAdapter("rerank", "r", 16),
        EmbeddingAdapter("embeddings", "e", 16),
        SparseAdapter("sparse", "s", 16),
    ],
)
def test_a_group_is_bucketed_by_its_longest_row(adapter) -> None:
    """Length bucketing of the grouped families: one definition (GroupedAdapter.length)."""

    def row(n: int) -> EncodedInput:
        return EncodedInput([1] * n, [0] * n, [1] * n)

    assert type(adapter).length is GroupedAdapter.length
    assert adapter.length(GroupFeature((row(3), row(7), row(5)), 0, False)) == 7
    assert adapter.length(row(4)) == 4  # a dev feature: one row
