"""``bertkit finetune --layerwise-lr-decay``: every family's optimizer trains its encoder layers at
their rates (the bi-encoder's and cross-encoder's too), the first AdamW update of a real run moves
the embeddings d^(L+1) times as far as without decay, 1.0 is the run of before, and a bad value is
a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertkit.cli import options
from bertkit.cli.main import build_parser, main
from bertkit.training import finetune as finetune_module
from bertkit.training.finetune import FinetuneConfig
from support.cli_runs import finetune
from support.tiny_glue import write_sentiment

from ..test_layerwise_lr import expected_exponent

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PAIRS = str(FIXTURES / "retrieval_pairs.jsonl")
LABELLED = str(FIXTURES / "rerank_pairs.jsonl")  # each query's positive (1) and another's (0)
CONLL, SQUAD, SWAG = (
    str(FIXTURES / n) for n in ("task_conll.txt", "task_squad_v1.json", "task_swag.csv")
)
FAMILIES = {
    "ner": ["--train", CONLL, "--dev", CONLL],
    "squad": [
        "--train",
        SQUAD,
        "--dev",
        SQUAD,
        "--max-seq-length",
        "64",
        "--doc-stride",
        "16",
        "--max-query-length",
        "16",
    ],
    "swag": ["--train", SWAG, "--dev", SWAG],
    "embeddings": ["--train", PAIRS, "--dev", PAIRS, "--max-seq-length", "16"],
    "rerank": ["--train", LABELLED, "--dev", LABELLED, "--max-seq-length", "16"],
}
"""The families besides glue and their data; every head class and the bi-encoder."""


class _Built:
    """Wraps fine-tuning's ``build_optimizer``: keeps each run's optimizer, the peak rate of
    every parameter (by name) and the weights the run started from."""

    def __init__(self) -> None:
        self.runs: list[tuple[torch.optim.Optimizer, dict[str, float], dict[str, torch.Tensor]]]
        self.runs = []
        self.build = finetune_module.build_optimizer

    def __call__(self, model, config):
        opt = self.build(model, config)
        named = [(n, p, g["lr"]) for g in opt.param_groups for n, p in zip(g["names"], g["params"])]
        peaks = {n: lr for n, _, lr in named}
        self.runs.append((opt, peaks, {n: p.detach().clone() for n, p, _ in named}))
        return opt


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> _Built:
    spy = _Built()
    monkeypatch.setattr(finetune_module, "build_optimizer", spy)
    return spy


@pytest.mark.parametrize("family", ["glue", *FAMILIES])
def test_every_family_trains_its_layers_at_their_rates(
    family: str, built: _Built, tiny_model: Path, tmp_path: Path
) -> None:
    args = FAMILIES.get(family) or [
        "--task",
        "SST-2",
        "--data-dir",
        str(write_sentiment(tmp_path / "d")),
    ]
    out = tmp_path / family
    m = finetune(family, tiny_model, out, *args, "--layerwise-lr-decay", "0.5", "--max-steps", "1")
    assert m["config"]["layerwise_lr_decay"] == 0.5
    ((opt, peaks, _start),) = built.runs
    assert len(peaks) == sum(len(g["params"]) for g in opt.param_groups)
    for n, peak in peaks.items():
        assert peak == pytest.approx(1e-3 * 0.5 ** expected_exponent(n), rel=1e-12), n
    # head 0 (the bi-encoder has none, its pooler set aside), layers 1-2, embeddings 3
    depths = {expected_exponent(n) for n in peaks}
    assert depths == ({1, 2, 3} if family == "embeddings" else {0, 1, 2, 3})


def _glue_run(tiny_model: Path, tmp_path: Path, name: str, *extra: str) -> dict:
    data = write_sentiment(tmp_path / "data", n_train=24, n_dev=8)
    argv = ["finetune", "glue", "--task", "SST-2", "--data-dir", str(data), "--model"]
    argv += [str(tiny_model), "--batch-size", "8", "--learning-rate", "1e-2", "--seed", "3"]
    argv += ["--dropout", "0", "--precision", "fp32", "--device", "cpu", "--output"]
    assert main([*argv, str(tmp_path / name), *extra]) == 0
    return json.loads((tmp_path / name / "metrics.json").read_text())


def test_the_first_adamw_update_moves_each_depth_by_its_rate(
    built: _Built, tiny_model: Path, tmp_path: Path
) -> None:
    """One update, no warmup, no weight decay: AdamW's first step is lr * g / (|g| + eps) for
    every parameter, so with the same weights and batch a parameter at depth k moves d^k times
    as far as without decay (the embeddings 0.5^3 = 1/8)."""
    plain = ["--max-steps", "1", "--warmup-proportion", "0", "--weight-decay", "0"]
    _glue_run(tiny_model, tmp_path, "off", *plain)
    _glue_run(tiny_model, tmp_path, "half", *plain, "--layerwise-lr-decay", "0.5")
    moves = []
    for opt, _peaks, start in built.runs:
        params = {n: p for g in opt.param_groups for n, p in zip(g["names"], g["params"])}
        moves.append({n: float((params[n].detach() - start[n]).norm()) for n in start})
    off, half = moves
    assert off.keys() == half.keys()
    checked = 0
    for n, move in off.items():
        if move > 0:
            k = expected_exponent(n)
            # fp32 weights of ~1 (LayerNorm) keep a move of ~1e-3 to about 4 digits
            assert half[n] == pytest.approx(move * 0.5**k, rel=2e-3), n
            checked += n.startswith("bert.embeddings.")
    assert checked >= 3  # word, position, segment embeddings (and their LayerNorm) moved


def test_decay_one_is_the_run_of_before(tiny_model: Path, tmp_path: Path) -> None:
    """The default and an explicit 1.0 train the same run to the last bit; 0.5 does not (the
    negative control: the comparison can see the option)."""
    runs = {
        name: _glue_run(tiny_model, tmp_path, name, "--epochs", "2", *extra)["runs"][0]["epochs"]
        for name, extra in [
            ("default", []),
            ("one", ["--layerwise-lr-decay", "1.0"]),
            ("half", ["--layerwise-lr-decay", "0.5"]),
        ]
    }
    loss = {name: [e["train_loss"] for e in epochs] for name, epochs in runs.items()}
    assert loss["default"] == loss["one"]
    assert loss["half"] != loss["default"]


def test_the_flag_is_parsed_into_the_config() -> None:
    base = ["finetune", "glue", "--task", "SST-2", "--data-dir", "d", "--model", "m"]
    base += ["--output", "o"]
    parse = build_parser().parse_args
    assert options.values(parse(base), FinetuneConfig).layerwise_lr_decay == 1.0
    args = parse([*base, "--layerwise-lr-decay", "0.8"])
    assert options.values(args, FinetuneConfig).layerwise_lr_decay == 0.8


def test_a_bad_value_is_a_one_line_error(tiny_model: Path, tmp_path: Path, capsys) -> None:
    data = write_sentiment(tmp_path / "data", n_train=8, n_dev=4)
    argv = ["finetune", "glue", "--task", "SST-2", "--data-dir", str(data)]
    argv += ["--model", str(tiny_model), "--output", str(tmp_path / "o")]
    assert main([*argv, "--layerwise-lr-decay", "1.5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "bertkit finetune: error: --layerwise-lr-decay must be in (0, 1] (1.0: off), got 1.5"
    ]
    assert not (tmp_path / "o").exists()
