"""Gradient accumulation in fine-tuning: an update over ``grad_accum`` micro-batches is the
update over the whole batch, for every head's loss (classification, tagging, which averages over
labelled word pieces that differ from example to example, span QA, multiple choice, a reranker's
group loss over each query's candidates), including an
epoch's last, short batch whose micro-batches may be empty; the contrastive family refuses it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from bertkit.cli.main import main
from bertkit.errors import ConfigError
from bertkit.model import (
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertkit.tasks.classification import ClassificationAdapter
from bertkit.tasks.embedding import EmbeddingAdapter
from bertkit.tasks.span_qa import SquadAdapter
from bertkit.training.distributed import DistInfo
from bertkit.training.epochs import EpochBatches
from bertkit.training.finetune import FinetuneConfig, check_accumulation, training_collate
from bertkit.training.loop import TrainConfig, Trainer
from bertkit.training.objectives import TaskLoss, _examples
from bertkit.training.schedule import ScheduleConfig
from support.tiny_glue import write_sentiment

from ..helpers import VOCAB, tiny_config

HEADS = {
    "classify": BertForSequenceClassification,
    "tag": BertForTokenClassification,
    "squad": BertForQuestionAnswering,
    "choice": BertForMultipleChoice,
    "rerank": BertForSequenceClassification,  # --loss ranking: groups of CHOICES rows
}
CHOICES = 3


def _features(task: str, n: int) -> list[dict]:
    """``n`` random examples of ``task``, 4 to 15 tokens each; a tagging example labels a random
    subset of its tokens (the others -100, as non-first word pieces are)."""
    g = torch.Generator().manual_seed(11)
    out = []
    for _ in range(n):
        rows = CHOICES if task in ("choice", "rerank") else 1
        t = int(torch.randint(4, 16, (1,), generator=g))
        ids = torch.randint(5, VOCAB, (rows, t), generator=g)
        f: dict = {"ids": ids}
        if task == "tag":
            tags = torch.randint(0, 3, (t,), generator=g)
            f["labels"] = torch.where(torch.rand(t, generator=g) < 0.5, tags, -100)
        elif task == "squad":
            start = int(torch.randint(1, t, (1,), generator=g))
            f["start"], f["end"] = start, int(torch.randint(start, t, (1,), generator=g))
        else:
            f["labels"] = int(
                torch.randint(0, CHOICES if task == "choice" else 2, (1,), generator=g)
            )
        out.append(f)
    return out


def _collate(task: str, feats: list[dict], length: int | None) -> dict[str, torch.Tensor]:
    """A training batch; span QA's through fine-tuning's own collate (its loss normalises over
    padding, so every micro-batch is padded to the update's ``length``)."""
    if task == "squad":
        return training_collate(SquadAdapter("squad", "squad"), 0)(
            [_Span(f) for f in feats], length, torch.Generator()
        )
    t = max(f["ids"].shape[1] for f in feats)
    ids = torch.zeros(len(feats), feats[0]["ids"].shape[0], t, dtype=torch.long)
    for i, f in enumerate(feats):
        ids[i, :, : f["ids"].shape[1]] = f["ids"]
    mask = (ids != 0).long()
    if task == "rerank":  # each group's rows one after the other, labels (B, G)
        ids, mask = ids.reshape(-1, t), mask.reshape(-1, t)
    elif task != "choice":
        ids, mask = ids[:, 0], mask[:, 0]
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask}
    if task == "rerank":
        batch["labels"] = torch.tensor([[1.0] + [0.0] * (CHOICES - 1)] * len(feats))
    elif task == "tag":
        batch["labels"] = torch.full((len(feats), t), -100, dtype=torch.long)
        for i, f in enumerate(feats):
            batch["labels"][i, : len(f["labels"])] = f["labels"]
    else:
        batch["labels"] = torch.tensor([f["labels"] for f in feats])
    return batch


class _Span:
    """What span QA's collate reads of a SQuAD feature."""

    def __init__(self, f: dict) -> None:
        self.input_ids = f["ids"][0].tolist()
        self.token_type_ids = [0] * len(self.input_ids)
        self.attention_mask = [1] * len(self.input_ids)
        self.start_position, self.end_position = f["start"], f["end"]


class _PerExample(TaskLoss):
    """The negative control: every micro-batch weighted by its examples, whatever the loss
    averages over."""

    def counts(self, batch: dict[str, torch.Tensor]) -> list[float]:
        return [_examples(batch)]


def _train(
    task: str, accum: int, batch: int, n: int, objective: TaskLoss | None = None
) -> dict[str, torch.Tensor]:
    """The parameters after 2 epochs of ``n`` examples in batches of ``batch`` (fp32, no dropout;
    warmup and decay, clipping as fine-tuning runs them). The optimizer is plain SGD, so that
    parameters move by the gradients themselves: AdamW would turn a gradient that is zero up to
    rounding (span QA's output bias: shifting every logit leaves the softmax as it is) into a
    step of the learning rate in a direction that rounding picks."""
    feats = _features(task, n)
    torch.manual_seed(0)
    config = tiny_config(dropout=0.0)
    config.num_labels = {"tag": 3, "rerank": 1}.get(task, 2)
    model = HEADS[task](config)
    if task == "rerank":
        model.group_loss = "ranking"
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    epochs = 2
    total = math.ceil(n / batch) * epochs
    source = EpochBatches(
        feats,
        [f["ids"].shape[1] for f in feats],
        lambda items, length, _draws: _collate(task, items, length),
        batch_size=batch,
        epochs=epochs,
        bucket_batches=1,
        generator=torch.Generator().manual_seed(1),
        info=DistInfo(),
        grad_accum=accum,
    )
    trainer = Trainer(
        model,
        opt,
        ScheduleConfig.from_proportion(total, 0.1),
        phases=None,
        collate=None,
        config=TrainConfig(
            batch_size=batch,
            grad_accum=accum,
            precision="fp32",
            save_every=total,
            show_progress=False,
            spike_factor=math.inf,
        ),
        run_dir=None,
        log=lambda m: None,
        objective=objective or TaskLoss(),
        batches=source,
    )
    trainer.fit()
    assert trainer.step == total and trainer.skipped == 0
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


@pytest.mark.parametrize("task", list(HEADS))
def test_accumulated_updates_equal_the_whole_batch(task: str) -> None:
    # 26 examples in batches of 12: the last batch of an epoch holds 2, so with 4 micro-batches
    # two are empty (one example, weight 0)
    whole = _train(task, 1, 12, 26)
    moved = _max_diff(whole, _train(task, 1, 12, 26, _Untrained()))
    assert moved > 1e-3  # it trained: not two no-ops compared
    for accum in (2, 4):
        assert _max_diff(whole, _train(task, accum, 12, 26)) < 1e-6, accum
    # an odd batch in 3 micro-batches of 3; the last batch (4 examples) in micro-batches 1, 1, 2
    assert _max_diff(_train(task, 1, 9, 22), _train(task, 3, 9, 22)) < 1e-6


class _Untrained(TaskLoss):
    """A zero loss: the parameters stay where they started."""

    def term(self, out, own, totals):
        return out.loss * 0.0


def test_weighting_micro_batches_by_examples_would_change_a_tagging_update() -> None:
    """The negative control: a tagging loss is a mean over labelled word pieces, so micro-batches
    weighted by their examples (what TaskLoss did before accumulation) give another update."""
    whole = _train("tag", 1, 12, 26, _PerExample())
    assert _max_diff(whole, _train("tag", 4, 12, 26, _PerExample())) > 1e-5
    assert _max_diff(_train("tag", 1, 12, 26), whole) < 1e-6  # one micro-batch: the same


def test_batch_size_must_be_divisible_by_grad_accum() -> None:
    assert FinetuneConfig(batch_size=32, grad_accum=4).grad_accum == 4
    with pytest.raises(ConfigError) as e:
        FinetuneConfig(batch_size=32, grad_accum=3)
    assert str(e.value) == "batch_size 32 must be divisible by grad_accum 3"
    with pytest.raises(ConfigError, match="grad_accum must be at least 1, got 0"):
        FinetuneConfig(grad_accum=0)


def test_in_batch_negatives_refuse_accumulation() -> None:
    config = FinetuneConfig(batch_size=32, grad_accum=2)
    with pytest.raises(ConfigError) as e:
        check_accumulation(EmbeddingAdapter, config)
    assert str(e.value) == (
        "grad_accum 2 would change this task's loss: each example is scored against the others "
        "of its batch (in-batch negatives), and a micro-batch of 16 has fewer than the batch of "
        "32; set mini_batch_size (--mini-batch-size) instead, which encodes the batch that many "
        "rows at a time and keeps every negative"
    )
    check_accumulation(EmbeddingAdapter, FinetuneConfig(batch_size=32))  # no accumulation: fine
    check_accumulation(ClassificationAdapter, config)  # rerank's head: pointwise, no coupling


def test_span_qa_pads_every_micro_batch_to_the_update(monkeypatch) -> None:
    """The negative control: micro-batches padded each to its own longest feature change the
    span softmax (it runs over the padding too), and with it the update."""
    monkeypatch.setattr(SquadAdapter, "loss_over_padding", False)
    assert _max_diff(_train("squad", 1, 12, 26), _train("squad", 4, 12, 26)) > 1e-5


def test_the_cli_flag_gives_the_same_run(tiny_model: Path, tmp_path: Path) -> None:
    """``bertkit finetune --grad-accum 3``: the epochs' training losses and dev scores of the run
    without accumulation (batch 9 of 22 examples: the last batch, 4, in micro-batches 1, 1, 2)."""
    data = write_sentiment(tmp_path / "data", n_train=22, n_dev=8)
    argv = ["finetune", "glue", "--task", "SST-2", "--data-dir", str(data), "--model"]
    argv += [str(tiny_model), "--epochs", "2", "--batch-size", "9", "--learning-rate", "1e-3"]
    argv += ["--dropout", "0", "--precision", "fp32", "--device", "cpu"]
    runs = []
    for accum in (1, 3):
        out = tmp_path / f"accum{accum}"
        assert main([*argv, "--grad-accum", str(accum), "--output", str(out)]) == 0
        runs.append(json.loads((out / "metrics.json").read_text())["runs"][0])
    one, three = (
        [(e["train_loss"], e["dev"]["dev"]["accuracy"]) for e in r["epochs"]] for r in runs
    )
    assert [r["steps"] for r in runs] == [6, 6]
    assert all(abs(a[0] - b[0]) < 1e-6 and a[1] == b[1] for a, b in zip(one, three, strict=True))


def test_the_contrastive_family_refuses_before_reading_its_data(tiny_model, tmp_path, capsys):
    missing = str(tmp_path / "absent.jsonl")  # never read: the refusal comes first
    argv = ["finetune", "embeddings", "--train", missing, "--dev", missing, "--model"]
    argv += [str(tiny_model), "--output", str(tmp_path / "o"), "--batch-size", "8"]
    assert main([*argv, "--grad-accum", "2"]) == 1
    assert capsys.readouterr().err.strip() == (
        "bertkit finetune: error: --grad-accum 2 would change this task's loss: each example is "
        "scored against the others of its batch (in-batch negatives), and a micro-batch of 4 "
        "has fewer than the batch of 8; set mini_batch_size (--mini-batch-size) instead, which "
        "encodes the batch that many rows at a time and keeps every negative"
    )
