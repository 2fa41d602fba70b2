"""Numerical faults injected at step k: a NaN or inf loss, or a NaN or inf gradient.

The update is skipped and logged, the step counter and learning-rate schedule do not advance, and
the weights equal a control run that consumed the same batch without training on it. 100 skips in
a row abort (through the CLI: one error line); a synthetic 3x loss jump is reported within 5 steps.
tests/training/test_loop.py holds the original NaN-loss test (via the ``nan_at_attempts`` switch);
these inject the faults from outside the loop, through hooks on the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertkit.cli.main import main
from bertkit.errors import ConfigError
from bertkit.training.distributed import DistInfo
from bertkit.training.update import TrainingError
from training.helpers import make_trainer, prepare_tiny_corpus

K = 2  # the faulty update attempt (0-based): the batch of step 3


def _weights(trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.core.state_dict().items()}


def _records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def inject(trainer, fault: str, attempts: set[int], factor: float | None = None) -> None:
    """Make the listed update attempts produce ``fault``: "nan_loss", "inf_loss" (the model's
    losses multiplied by NaN/inf), "nan_grad", "inf_grad" (one gradient entry poisoned by a
    backward hook, the loss stays finite) or "scale_loss" (losses multiplied by ``factor``)."""
    model = trainer.core

    def current() -> bool:
        return trainer.attempts - 1 in attempts  # attempts counts the one in progress

    if fault.endswith("_loss"):
        value = {"nan_loss": float("nan"), "inf_loss": float("inf")}.get(fault, factor)

        def forward_hook(module, args, kwargs, out):
            if current():
                out.loss, out.mlm_loss, out.nsp_loss = (
                    out.loss * value,
                    out.mlm_loss * value,
                    out.nsp_loss * value,
                )
            return out

        model.register_forward_hook(forward_hook, with_kwargs=True)
    else:
        bad = float("nan") if fault == "nan_grad" else float("inf")

        def grad_hook(grad):
            if not current():
                return grad
            grad = grad.clone()
            grad.view(-1)[0] = bad
            return grad

        model.bert.embeddings.word.weight.register_hook(grad_hook)


@pytest.fixture(scope="module")
def baselines(tmp_path_factory) -> dict:
    """The control that consumed batch K without training on it, and the plain run."""
    root = tmp_path_factory.mktemp("baselines")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the tests (module fixtures run before the autouse one_thread)
    control = make_trainer(root / "ctl", steps=6, dropout=0.0, drop_attempts=frozenset({K}))
    control.fit()
    plain = make_trainer(root / "plain", steps=6, dropout=0.0)
    plain.fit()
    torch.set_num_threads(threads)
    return {
        "control": _weights(control),
        "control_opt": control.optimizer.state_dict()["state"],
        "plain": _weights(plain),
        "plain_lr": [r["lr"] for r in _records(root / "plain") if r["type"] == "train"],
    }


@pytest.mark.parametrize("fault", ["nan_loss", "inf_loss", "nan_grad", "inf_grad"])
def test_faulty_update_is_skipped_like_a_dropped_batch(tmp_path, fault, baselines):
    msgs: list[str] = []
    faulty = make_trainer(tmp_path / "faulty", steps=6, dropout=0.0)
    faulty._log = msgs.append
    inject(faulty, fault, {K})
    result = faulty.fit()

    assert result.step == 6 and result.skipped == 1
    recs = _records(tmp_path / "faulty")
    assert [(r["step"], r["attempt"]) for r in recs if r["type"] == "skip"] == [(K + 1, K)]
    assert any("non-finite loss or gradient at step 2; update skipped" in m for m in msgs), msgs
    # step counter and schedule did not advance: steps 1..6 logged once each, plain run's lr
    train = [r for r in recs if r["type"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 7))
    assert [r["lr"] for r in train] == baselines["plain_lr"]
    state = json.loads(
        (tmp_path / "faulty" / "checkpoints" / "step-000000006" / "state.json").read_text()
    )
    assert state["scheduler"]["step"] == 6 and state["counters"]["skipped"] == 1
    # the weights equal the control that skipped that batch, and differ from training on it
    weights = _weights(faulty)
    assert all(torch.equal(weights[k], baselines["control"][k]) for k in weights)
    assert not all(torch.equal(weights[k], baselines["plain"][k]) for k in weights)
    # and the optimizer state too (Adam moments untouched by the poisoned gradient)
    fo, co = faulty.optimizer.state_dict()["state"], baselines["control_opt"]
    assert all(torch.equal(fo[i][k], co[i][k]) for i in fo for k in fo[i])


def test_one_hundred_consecutive_skips_abort(tmp_path):
    trainer = make_trainer(tmp_path / "r", steps=6)  # default max_consecutive_skips=100
    inject(trainer, "nan_grad", set(range(2, 1000)))
    with pytest.raises(TrainingError, match="100 consecutive updates had a non-finite"):
        trainer.fit()
    assert trainer.step == 2 and trainer.skipped == 100


def test_ninety_nine_consecutive_skips_recover(tmp_path):
    """Boundary: 99 skips in a row, then good updates: the run finishes (the count resets)."""
    trainer = make_trainer(tmp_path / "r", steps=4)
    inject(trainer, "inf_loss", set(range(1, 100)))
    result = trainer.fit()
    assert result.step == 4 and result.skipped == 99


def test_cli_abort_is_one_line(tmp_path, capsys):
    data = prepare_tiny_corpus(tmp_path / "corpus", docs=12, holdout=0.0)
    argv = [
        "pretrain",
        "--data",
        str(data),
        "--output",
        str(tmp_path / "run"),
        "--max-steps",
        "5",
        "--batch-size",
        "4",
        "--threads",
        "1",
        "--peak-tflops",
        "1",
        "--no-progress",
        "--debug-nan-at",
        *[str(i) for i in range(1, 101)],
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("bertkit pretrain: error: 100 consecutive updates"), err[-1]
    assert not any("Traceback" in line for line in err)
    with pytest.raises(TrainingError):  # --debug shows the traceback instead
        main(["--debug", *argv])


@pytest.mark.parametrize("jump", [3.0, 1.0])
def test_three_fold_loss_jump_reported_within_five_steps(tmp_path, jump):
    """A real 3x jump of the model's loss at step 9 is reported (log + metrics) by step 13; the
    control without a jump (factor 1) reports nothing."""
    msgs: list[str] = []
    trainer = make_trainer(tmp_path / "r", steps=14, dropout=0.0)
    trainer._log = msgs.append
    inject(trainer, "scale_loss", {8}, factor=jump)  # attempt 8 = step 9
    trainer.fit()
    spikes = [r["step"] for r in _records(tmp_path / "r") if r["type"] == "spike"]
    warned = [m for m in msgs if "loss spike" in m]
    if jump == 1.0:
        assert spikes == [] and warned == []
    else:
        assert spikes and 9 <= spikes[0] <= 13, spikes
        assert warned and f"step {spikes[0]}" in warned[0]


def test_fp16_uses_a_grad_scaler_and_needs_cuda(tmp_path):
    with pytest.raises(ConfigError, match="fp16 needs CUDA"):
        make_trainer(tmp_path / "cpu", precision="fp16")
    if torch.cuda.is_available():  # a real GPU: the scaler is enabled, no warning
        trainer = make_trainer(tmp_path / "cuda", precision="fp16", info=DistInfo(device="cuda"))
    else:
        with pytest.warns(UserWarning):  # no CUDA: the scaler is built but warns it is disabled
            trainer = make_trainer(
                tmp_path / "cuda", precision="fp16", info=DistInfo(device="cuda")
            )
    assert isinstance(trainer.scaler, torch.amp.GradScaler)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fp16_overflow_is_skipped_and_lowers_the_loss_scale(tmp_path):
    trainer = make_trainer(
        tmp_path / "r", steps=4, dropout=0.0, precision="fp16", info=DistInfo(device="cuda")
    )
    trainer.core.cuda()
    inject(trainer, "inf_grad", {1})
    result = trainer.fit()
    assert result.step == 4 and result.skipped == 1
    assert trainer.scaler.get_scale() < 2.0**16
