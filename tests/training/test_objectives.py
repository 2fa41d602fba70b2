"""``bertkit pretrain --objective mlm+nsp|mlm|ltr``: what each logs and saves, and a resume that
stays bit-identical for each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.training.loop import TrainConfig, Trainer
from bertkit.training.pretraining import PretrainOptions, pretrain

from .helpers import Stop, prepare_tiny_corpus

STEPS = 8


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_tiny_corpus(tmp_path_factory.mktemp("objectives"), docs=30)


def _opts(data: Path, out: Path, objective: str, **kw) -> PretrainOptions:
    train = TrainConfig(
        batch_size=8,
        seed=3,
        precision="fp32",
        log_every=1,
        eval_every=4,
        eval_examples=32,
        save_every=2,
        show_progress=False,
        peak_flops=1e9,
    )
    return PretrainOptions(
        data=data,
        output=out,
        max_steps=STEPS,
        learning_rate=1e-3,
        warmup_steps=2,
        objective=objective,
        device="cpu",
        threads=1,
        dropout=0.1,
        train=train,
        **kw,
    )


def _records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


EXPECT = {
    "mlm+nsp": ({"mlm_acc", "nsp_acc"}, "BertForPreTraining"),
    "mlm": ({"mlm_acc"}, "BertForMaskedLM"),
    "ltr": ({"lm_acc"}, "BertLMHeadModel"),
}


@pytest.mark.parametrize("objective", list(EXPECT))
def test_each_objective_logs_and_saves_only_its_own_figures(
    data: Path, tmp_path: Path, objective: str
):
    out = tmp_path / objective
    result = pretrain(_opts(data, out, objective), log=lambda m: None)
    figures, arch = EXPECT[objective]
    others = (
        {"mlm_acc", "nsp_acc", "lm_acc", "mlm_loss", "nsp_loss", "lm_loss"}
        - figures
        - {f.replace("_acc", "_loss") for f in figures}
    )
    for r in _records(out):
        if r["type"] in ("train", "eval"):
            assert figures <= set(r) and not (others & set(r)), (objective, r)
    assert set(result.final_eval) >= figures
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["architectures"] == [arch] and config["is_decoder"] is (objective == "ltr")


def test_ltr_learns_the_next_token(data: Path, tmp_path: Path):
    """A left-to-right LM beats a uniform guess at the next token of held-out text (the tiny
    corpus draws words uniformly, so little more than the word/punctuation structure is there)."""
    out = tmp_path / "ltr-long"
    opts = _opts(data, out, "ltr")
    opts.max_steps = 60
    opts.learning_rate = 3e-3
    evals = [
        r for r in (pretrain(opts, log=lambda m: None), _records(out))[1] if r["type"] == "eval"
    ]
    assert evals[-1]["lm_loss"] < evals[0]["lm_loss"]
    assert evals[-1]["perplexity"] < 0.85 * 66  # 66 = the vocabulary's size: a uniform guess


@pytest.mark.parametrize("objective", list(EXPECT))
def test_resume_is_bit_identical_for_each_objective(
    data: Path, tmp_path: Path, objective: str, monkeypatch
):
    ref = tmp_path / "ref"
    pretrain(_opts(data, ref, objective), log=lambda m: None)
    run = tmp_path / "run"
    original = Trainer._train_step

    def crash_after_5(self, model):
        out = original(self, model)
        if self.step > 5:
            raise Stop
        return out

    monkeypatch.setattr(Trainer, "_train_step", crash_after_5)
    with pytest.raises(Stop):
        pretrain(_opts(data, run, objective), log=lambda m: None)
    monkeypatch.setattr(Trainer, "_train_step", original)
    pretrain(_opts(data, run, objective), log=lambda m: None)  # resumes from step 4

    def losses(folder: Path) -> list[tuple[int, float]]:
        return [(r["step"], r["loss"]) for r in _records(folder) if r["type"] == "train"]

    assert losses(run) == losses(ref) and len(losses(ref)) == STEPS
    from safetensors.torch import load_file

    a, b = (
        load_file(ref / "model" / "model.safetensors"),
        load_file(run / "model" / "model.safetensors"),
    )
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


def test_random_next_drop_trains_on_actual_next_pairs_only(data: Path, tmp_path: Path):
    from bertkit.data.shards import ActualNextView, PretrainingDataset

    ds = PretrainingDataset(data)
    view = ActualNextView(ds)
    assert 0 < len(view) < len(ds)
    assert all(view[i]["next_sentence_label"] == 0 for i in range(len(view)))
    assert len(view) == sum(ds[i]["next_sentence_label"] == 0 for i in range(len(ds)))
    pretrain(_opts(data, tmp_path / "drop", "mlm", random_next="drop"), log=lambda m: None)
    from bertkit.errors import ConfigError

    with pytest.raises(ConfigError, match="use it with --objective mlm or ltr"):
        pretrain(_opts(data, tmp_path / "bad", "mlm+nsp", random_next="drop"), log=lambda m: None)


def test_nsp_weight_scales_only_the_nsp_term_of_the_update():
    from types import SimpleNamespace

    import torch

    from bertkit.training.objectives import MlmNsp

    out = SimpleNamespace(mlm_loss=torch.tensor(4.0), nsp_loss=torch.tensor(0.5))
    # a micro-batch with 3 of the step's 12 masked tokens and 2 of its 8 examples
    own, totals = [3.0, 2.0], [12.0, 8.0]
    assert float(MlmNsp().term(out, own, totals)) == 4.0 * 3 / 12 + 0.5 * 2 / 8
    assert float(MlmNsp(2.5).term(out, own, totals)) == 4.0 * 3 / 12 + 2.5 * 0.5 * 2 / 8


def test_nsp_weight_changes_the_updates_and_is_checked(data: Path, tmp_path: Path):
    from bertkit.errors import ConfigError

    def losses(folder: Path) -> list[tuple[float, float]]:
        rows = [r for r in _records(folder) if r["type"] == "train"]
        return [(r["mlm_loss"], r["nsp_loss"]) for r in rows]

    pretrain(_opts(data, tmp_path / "w1", "mlm+nsp"), log=lambda m: None)
    pretrain(_opts(data, tmp_path / "w3", "mlm+nsp", nsp_weight=3.0), log=lambda m: None)
    one, three = losses(tmp_path / "w1"), losses(tmp_path / "w3")
    assert one[0] == three[0]  # the first update's losses come before any weighted step
    assert one[1:] != three[1:]
    assert all(n < 1.5 for _, n in three)  # logged unweighted: ~0.69, not 3 x that
    from bertkit.errors import CheckpointError

    with pytest.raises(CheckpointError, match=r"nsp_weight=3\.0, this run has nsp_weight=1\.0"):
        pretrain(_opts(data, tmp_path / "w3", "mlm+nsp"), log=lambda m: None)  # a resume
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ConfigError, match="nsp_weight must be a positive number"):
            pretrain(_opts(data, tmp_path / "bad", "mlm+nsp", nsp_weight=bad), log=lambda m: None)
    with pytest.raises(ConfigError, match="objective 'mlm' has none"):
        pretrain(_opts(data, tmp_path / "bad", "mlm", nsp_weight=2.0), log=lambda m: None)


def test_num_attention_heads_overrides_the_size_and_is_checked(data: Path, tmp_path: Path):
    from bertkit.errors import CheckpointError, ConfigError

    opts = _opts(data, tmp_path / "h4", "mlm+nsp", num_attention_heads=4)
    pretrain(opts, log=lambda m: None)
    saved = json.loads((tmp_path / "h4" / "model" / "config.json").read_text())
    assert (saved["hidden_size"], saved["num_attention_heads"]) == (128, 4)  # tiny: 2 heads
    with pytest.raises(
        CheckpointError, match="num_attention_heads=4, this run has num_attention_heads=2"
    ):
        pretrain(_opts(data, tmp_path / "h4", "mlm+nsp", num_attention_heads=2), log=lambda m: None)
    with pytest.raises(ConfigError, match="must divide hidden_size 128, got 3"):
        pretrain(_opts(data, tmp_path / "h3", "mlm+nsp", num_attention_heads=3), log=lambda m: None)
    warm = _opts(
        data, tmp_path / "w", "mlm+nsp", num_attention_heads=2, init_from=tmp_path / "h4" / "model"
    )
    with pytest.raises(ConfigError, match="has 4 attention heads, --num-attention-heads says 2"):
        pretrain(warm, log=lambda m: None)


def test_one_attention_head_is_a_valid_override_and_none_is_refused(data: Path, tmp_path: Path):
    from bertkit.errors import ConfigError
    from bertkit.training.pretraining import build_config

    one = build_config(_opts(data, tmp_path / "h1", "mlm+nsp", num_attention_heads=1), 64)
    assert (one.hidden_size, one.num_attention_heads) == (128, 1)  # one head of 128
    for bad in (0, -2):  # -2 divides 128: the sign is checked apart
        with pytest.raises(ConfigError, match=f"must divide hidden_size 128, got {bad}"):
            build_config(_opts(data, tmp_path / "h", "mlm+nsp", num_attention_heads=bad), 64)
