"""Layer-wise learning-rate decay: every parameter in exactly one group at the rate of its depth
(head and pooler lr, layer i of L lr * d^(L-i), embeddings lr * d^(L+1)) for every model class the
fine-tuning families train; the schedule scales every group alike, so an update of layer k moves
it d^k times as far; 1.0 is the two groups of before; resume keeps the groups' rates."""

from __future__ import annotations

import copy
import math
import re

import pytest
import torch

from bertkit.errors import ConfigError
from bertkit.model import (
    BertForMultipleChoice,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)
from bertkit.model.contrastive import BiEncoder
from bertkit.training.finetune import FinetuneConfig
from bertkit.training.optim import OptimizerConfig, build_optimizer, param_groups
from bertkit.training.schedule import ScheduleConfig, lr_factor, set_lr

from .helpers import losses, make_trainer, tiny_config
from .test_loop import _interrupted, _same, _weights

LAYERS = 2  # tiny_config's
MODELS = {
    "classification": lambda c: BertForSequenceClassification(c),
    "token": lambda c: BertForTokenClassification(c),
    "span": lambda c: BertForQuestionAnswering(c),
    "choice": lambda c: BertForMultipleChoice(c),
    "bi-encoder": lambda c: BiEncoder(BertModel(c)),
    "pretraining": lambda c: BertForPreTraining(c),
    "bare": lambda c: BertModel(c),
}


def expected_exponent(name: str) -> int:
    """The oracle, by name (the code finds layers by module type): k of lr * d^k."""
    layer = re.search(r"(?:^|\.)encoder\.layers\.(\d+)\.", name)
    if layer:
        return LAYERS - int(layer.group(1))
    return LAYERS + 1 if re.match(r"(?:.*\.)?embeddings\.", name) else 0


def _decaying(model: torch.nn.Module) -> dict[str, bool]:
    """Parameter name -> gets weight decay, by today's two groups."""
    return {n: g["weight_decay"] > 0 for g in param_groups(model, 0.01) for n in g["names"]}


@pytest.mark.parametrize("kind", list(MODELS))
def test_group_rates_follow_the_formula(kind: str) -> None:
    torch.manual_seed(0)
    model = MODELS[kind](tiny_config(0.0))
    groups = param_groups(model, 0.01, lr=1e-3, layerwise_lr_decay=0.5)
    ids = [id(p) for g in groups for p in g["params"]]
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert len(ids) == len(set(ids)) and set(ids) == trainable  # each once, none missed
    weight_decay = _decaying(model)
    rates: dict[int, float] = {}
    for g in groups:
        assert len(g["names"]) == len(g["params"]) > 0
        for name in g["names"]:
            k = expected_exponent(name)
            assert g["lr"] == pytest.approx(1e-3 * 0.5**k, rel=1e-12), name
            assert (g["weight_decay"] == 0.01) == weight_decay[name], name
            rates[k] = g["lr"]
    # the head (or, with no head, the top layer) first: its rate is the one the loop logs
    assert groups[0]["lr"] == max(g["lr"] for g in groups)
    assert set(rates) <= set(range(LAYERS + 2)) and {1, 2, 3} <= set(rates)
    pooler = getattr(getattr(model, "bert", model), "pooler", None)
    if pooler is not None:  # the pooler sits above the last layer: the head's rate
        names = {n for g in groups if g["lr"] == 1e-3 for n in g["names"]}
        assert (
            {n for n in names if "pooler." in n}
            == {n for n in weight_decay if "pooler." in n}
            != set()
        )


def test_tied_word_embeddings_learn_at_the_embeddings_rate() -> None:
    """The MLM decoder shares the word embeddings: one parameter, the embeddings' rate."""
    model = BertForPreTraining(tiny_config(0.0))
    word = model.bert.embeddings.word.weight
    (group,) = [
        g
        for g in param_groups(model, 0.01, lr=1.0, layerwise_lr_decay=0.5)
        if any(p is word for p in g["params"])
    ]
    assert group["lr"] == 0.5 ** (LAYERS + 1)


def test_decay_one_is_the_two_groups_of_before() -> None:
    model = BertForSequenceClassification(tiny_config(0.0))
    before = param_groups(model, 0.01)
    off = param_groups(model, 0.01, lr=3e-5, layerwise_lr_decay=1.0)
    assert [set(g) for g in off] == [{"params", "weight_decay", "names"}] * 2  # no "lr" set
    assert [(g["names"], g["weight_decay"]) for g in off] == [
        (g["names"], g["weight_decay"]) for g in before
    ]
    assert [[id(p) for p in g["params"]] for g in off] == [
        [id(p) for p in g["params"]] for g in before
    ]
    a = build_optimizer(model, OptimizerConfig(lr=3e-5)).state_dict()["param_groups"]
    b = build_optimizer(model, OptimizerConfig(lr=3e-5, layerwise_lr_decay=1.0))
    assert a == b.state_dict()["param_groups"]


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.01, 2.0, math.nan, math.inf])
def test_bad_values_are_a_config_error(bad: float) -> None:
    message = f"layerwise_lr_decay must be in (0, 1] (1.0: off), got {bad}"
    for make in (OptimizerConfig, FinetuneConfig):
        with pytest.raises(ConfigError) as e:
            make(layerwise_lr_decay=bad)
        assert str(e.value) == message


def test_a_model_without_a_bert_encoder_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs a model with a BERT encoder"):
        param_groups(torch.nn.Linear(3, 2), 0.0, lr=1.0, layerwise_lr_decay=0.8)
    assert len(param_groups(torch.nn.Linear(3, 2), 0.0)) == 2  # off: any model


def _sgd_moves(decay: float, steps: int, schedule: ScheduleConfig) -> dict[str, list[float]]:
    """Per parameter, how far each of ``steps`` SGD updates (set_lr's rates, as the loop sets
        them) moves it; the same batch each step, so the gradients only differ by the moves (fp64:
    a move of 1e-4 on a LayerNorm weight of 1 would keep 3 digits in fp32)."""
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_config(0.0)).double()  # moves exact to 1e-12
    opt = torch.optim.SGD(param_groups(model, 0.0, lr=0.5, layerwise_lr_decay=decay), lr=0.5)
    peaks = [g["lr"] for g in opt.param_groups]
    ids = torch.randint(5, 40, (4, 9), generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([0, 1, 1, 0])
    moves: dict[str, list[float]] = {n: [] for n, _ in model.named_parameters()}
    for step in range(steps):
        set_lr(opt, peaks, step, schedule)
        for g, peak in zip(opt.param_groups, peaks, strict=True):
            assert g["lr"] == peak * lr_factor(step, schedule)  # every group scaled alike
        before = copy.deepcopy(model.state_dict())
        model(ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
        for n, p in model.named_parameters():
            moves[n].append(float((p.detach() - before[n]).norm()))
    return moves


def test_the_first_update_moves_each_depth_by_its_rate() -> None:
    """Plain SGD, no warmup: the first update of a parameter at depth k is d^k times the update
    without decay (the same gradient: both start from the same weights and batch)."""
    schedule = ScheduleConfig(total_steps=4)
    off, half = _sgd_moves(1.0, 1, schedule), _sgd_moves(0.5, 1, schedule)
    moved = [n for n in off if off[n][0] > 0]
    assert any(n.startswith("bert.embeddings.") for n in moved)
    for n in moved:
        k = expected_exponent(n)
        assert half[n][0] == pytest.approx(off[n][0] * 0.5**k, rel=1e-9), n
    assert any(half[n][0] < 0.2 * off[n][0] for n in moved)  # not a no-op compared


def test_inside_the_warmup_every_depth_keeps_its_ratio() -> None:
    """Warmup over 2 of 6 updates: update 0 has rate 0 and moves nothing, so update 1 (half the
    peak) sees the starting weights again and moves depth k by d^k times the undecayed move."""
    schedule = ScheduleConfig(total_steps=6, warmup_steps=2)
    off, half = _sgd_moves(1.0, 2, schedule), _sgd_moves(0.5, 2, schedule)
    assert all(m[0] == 0.0 for m in half.values())
    moved = [n for n in off if off[n][1] > 0]
    assert any(n.startswith("bert.embeddings.") for n in moved)
    for n in moved:
        assert half[n][1] == pytest.approx(off[n][1] * 0.5 ** expected_exponent(n), rel=1e-9), n


def test_resume_keeps_every_groups_rate(tmp_path) -> None:
    """A run with layer-wise decay killed and resumed from its checkpoint ends bit-identical to
    the uninterrupted run: the saved peaks and group rates are the layers' own."""
    ref = make_trainer(tmp_path / "ref", steps=8, layerwise_lr_decay=0.5)
    ref.fit()
    assert len(ref.peak_lrs) > 2 and len(set(ref.peak_lrs)) == LAYERS + 2
    resumed, run = _interrupted(tmp_path, "run", stop_after=4, layerwise_lr_decay=0.5)
    assert losses(run) == losses(tmp_path / "ref") and len(losses(run)) == 8
    assert _same(_weights(resumed), _weights(ref))
    assert resumed.peak_lrs == ref.peak_lrs
    assert [g["lr"] for g in resumed.optimizer.param_groups] == [
        g["lr"] for g in ref.optimizer.param_groups
    ]
    # the negative control: the same run without decay is another run
    plain = tmp_path / "plain"
    _interrupted(tmp_path, "plain", stop_after=4)
    assert losses(plain) != losses(run)
