"""Task-specific distillation (:mod:`bertkit.training.distill`): the loss against a hand
computation, alpha 0 as ordinary fine-tuning bit for bit, gradient accumulation, the teacher's
labels matched by name or refused, and the teacher reading the examples with its own tokenizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit.data.tasks.glue import read_glue_split
from bertkit.errors import ConfigError
from bertkit.inference.runner import predict_rows
from bertkit.inference.task_model import TaskModel
from bertkit.interop import load_pretrained
from bertkit.model import BertForSequenceClassification
from bertkit.tasks import ClassificationAdapter
from bertkit.tokenizer import BertTokenizer
from bertkit.training.distill import (
    TEACHER_KEY,
    DistillLoss,
    align_labels,
    distill_loss,
    teacher_logits,
)
from bertkit.training.finetune import FinetuneConfig, TaskData, train_one
from bertkit.training.update import UpdateStep
from support.tiny_glue import write_sentiment, write_teacher

from ..helpers import VOCAB, tiny_config


def _adapter(labels: list[str] | None = None, metric: str = "accuracy") -> ClassificationAdapter:
    labels = ["0", "1"] if labels is None else labels
    return ClassificationAdapter("glue", "SST-2", 32, labels=labels, metric=metric)


# ---- the loss ----------------------------------------------------------------------------------


def test_loss_is_the_hand_computed_mix_of_gold_and_soft_targets() -> None:
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g) * 2
    gold = torch.tensor([0, 2, 1, 1, 0])
    ce = F.cross_entropy(s, gold)
    for alpha, temp in ((0.3, 3.0), (1.0, 1.0), (0.5, 0.5)):
        p_t = torch.softmax(t / temp, -1)
        kl = (p_t * (p_t.log() - torch.log_softmax(s / temp, -1))).sum(-1).mean()
        want = (1 - alpha) * ce + alpha * temp**2 * kl
        got = distill_loss(s, t, ce, alpha, temp)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    # T^2: the soft term's scale; without it T = 4 would give a 16 times smaller loss
    soft = distill_loss(s, t, ce, 1.0, 4.0)
    p_t = torch.softmax(t / 4, -1)
    kl = (p_t * (p_t.log() - torch.log_softmax(s / 4, -1))).sum(-1).mean()
    torch.testing.assert_close(soft, 16 * kl)
    assert float(distill_loss(t, t, ce, 1.0, 2.0)) == pytest.approx(0.0, abs=1e-6)


def test_regression_matches_the_teachers_score_by_mse_without_temperature() -> None:
    s, t = torch.tensor([[0.5], [2.0], [-1.0]]), torch.tensor([[1.0], [1.0], [1.0]])
    task = torch.tensor(0.25)
    want = 0.6 * 0.25 + 0.4 * ((0.5**2 + 1.0 + 4.0) / 3)
    for temp in (1.0, 5.0):
        assert float(distill_loss(s, t, task, 0.4, temp)) == pytest.approx(want)


def test_config_refuses_alpha_outside_0_1_and_a_non_positive_temperature() -> None:
    with pytest.raises(ConfigError, match="distill alpha must be in"):
        FinetuneConfig(distill_alpha=1.5)
    with pytest.raises(ConfigError, match="distill temperature must be positive"):
        FinetuneConfig(distill_temperature=0.0)


# ---- training ----------------------------------------------------------------------------------


def _train(tiny_model: Path, tmp_path: Path, teacher: np.ndarray | None, **config) -> dict:
    """The parameters after 6 updates of a run (seed 5, dropout on: the draws must line up)."""
    data = write_sentiment(tmp_path / "glue", n_train=24, n_dev=8)
    tok = BertTokenizer.from_pretrained(tiny_model)
    adapter = _adapter()
    train = adapter.encode(tok, read_glue_split(data, "SST-2", "train"), training=True)
    dev_ex = read_glue_split(data, "SST-2", "dev")
    dev = {"dev": (dev_ex, adapter.encode(tok, dev_ex, training=False))}
    kept: dict[str, torch.Tensor] = {}

    def on_best(model, _adapter, _score, _record) -> None:
        kept.update({k: v.detach().clone() for k, v in model.state_dict().items()})

    def build():
        return load_pretrained(tiny_model, adapter.head_class, **adapter.config_overrides())

    cfg = FinetuneConfig(epochs=1, batch_size=4, precision="fp32", show_progress=False, **config)
    result = train_one(
        build,
        adapter,
        TaskData(train, dev, teacher),
        cfg,
        1e-3,
        5,
        pad_id=0,
        on_best=on_best,
        log=lambda m: None,
    )
    assert result.steps == 6 and result.skipped == 0
    return kept


def _teacher(n: int) -> np.ndarray:
    return torch.randn(n, 2, generator=torch.Generator().manual_seed(3)).numpy() * 3


def test_alpha_0_is_ordinary_finetuning_bit_for_bit(tiny_model: Path, tmp_path: Path) -> None:
    plain = _train(tiny_model, tmp_path, None)
    zero = _train(tiny_model, tmp_path, _teacher(24), distill_alpha=0.0)
    assert plain.keys() == zero.keys()
    assert all(torch.equal(plain[k], zero[k]) for k in plain)
    # negative control: the teacher's soft targets move the parameters
    half = _train(tiny_model, tmp_path, _teacher(24), distill_alpha=0.5)
    assert not all(torch.equal(plain[k], half[k]) for k in plain)


def _update(micro_batches: list[dict[str, torch.Tensor]], objective) -> dict:
    """The parameters after one SGD update (lr 1: they move by the gradient itself, which AdamW
    would rescale element by element) over ``micro_batches``."""
    torch.manual_seed(0)
    config = tiny_config(dropout=0.0)
    config.num_labels = 3
    model = BertForSequenceClassification(config)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    step = UpdateStep(opt, objective, list(model.parameters()), "fp32", "cpu", clip_norm=1e9)
    assert step(model, micro_batches) is not None
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_micro_batches_give_the_whole_batchs_distillation_update() -> None:
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(5, VOCAB, (6, 7), generator=g)
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "labels": torch.tensor([0, 1, 2, 2, 1, 0]),
        TEACHER_KEY: torch.randn(6, 3, generator=g) * 3,
    }
    parts = [{k: v[:2] for k, v in batch.items()}, {k: v[2:] for k, v in batch.items()}]
    loss = DistillLoss(0.7, 3.0)
    whole = _update([batch], loss)
    split = _update(parts, loss)
    for k in whole:
        torch.testing.assert_close(split[k], whole[k], rtol=1e-5, atol=1e-6)
    # negative control: the teacher's term is in the update (alpha 0 moves the head elsewhere)
    hard = _update([batch], DistillLoss(0.0, 3.0))
    assert not torch.allclose(hard["classifier.weight"], whole["classifier.weight"])


# ---- the teacher -------------------------------------------------------------------------------


def test_labels_are_matched_by_name_or_refused_naming_both_lists() -> None:
    student = _adapter(["neg", "pos"])
    assert align_labels(_adapter(["neg", "pos"]), student, "t") == [0, 1]
    assert align_labels(_adapter(["pos", "neg"]), student, "t") == [1, 0]
    with pytest.raises(ConfigError) as e:
        align_labels(_adapter(["0", "1"]), student, "out/teacher")
    msg = str(e.value)
    assert "\n" not in msg and "['0', '1']" in msg and "['neg', 'pos']" in msg
    assert "out/teacher" in msg
    with pytest.raises(ConfigError, match="regression model; the student's task is classif"):
        align_labels(_adapter([], "pearson_spearman"), student, "t")


def test_teacher_logits_come_from_the_teachers_own_tokenizer(
    tiny_model: Path, tmp_path: Path
) -> None:
    data = write_sentiment(tmp_path / "glue", n_train=12, n_dev=4)
    examples = read_glue_split(data, "SST-2", "train")
    vocab = (Path(tiny_model) / "vocab.txt").read_text(encoding="utf-8").split("\n")
    specials, words = vocab[:5], [w for w in vocab[5:] if w]
    teacher_dir = write_teacher(tmp_path / "teacher", _adapter(["1", "0"]), specials + words[::-1])
    student = _adapter()
    got = teacher_logits(
        teacher_dir,
        student,
        examples,
        device="cpu",
        precision="fp32",
        batch_size=5,
        log=lambda m: None,
    )
    teacher = TaskModel.load(teacher_dir, device="cpu", precision="fp32")
    own = np.array([p["logits"] for p in teacher.run(examples).predictions], dtype=np.float32)
    assert got.shape == (12, 2)
    np.testing.assert_allclose(got, own[:, [1, 0]], rtol=1e-5, atol=1e-6)  # student's order
    # the same examples in the student's word pieces give the teacher other inputs
    student_tok = BertTokenizer.from_pretrained(tiny_model)
    feats = student.encode(student_tok, examples, training=False)
    assert [f.input_ids for f in feats] != [
        f.input_ids for f in teacher.adapter.encode(teacher.tokenizer, examples, training=False)
    ]
    rows = predict_rows(teacher.model, teacher.adapter, feats, batch_size=5)
    wrong = student.example_logits(feats, rows, len(examples))[:, [1, 0]]
    assert np.abs(got - wrong).max() > 1e-2


def test_a_teacher_for_another_label_set_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    data = write_sentiment(tmp_path / "glue", n_train=4, n_dev=4)
    examples = read_glue_split(data, "SST-2", "train")
    vocab = (Path(tiny_model) / "vocab.txt").read_text(encoding="utf-8").split("\n")
    teacher_dir = write_teacher(
        tmp_path / "teacher", _adapter(["a", "b", "c"]), [w for w in vocab if w]
    )
    with pytest.raises(ConfigError, match=r"labels \['a', 'b', 'c'\]; the student's .*'0', '1'"):
        teacher_logits(
            teacher_dir, _adapter(), examples, device="cpu", precision="fp32", batch_size=4
        )
