"""``score_checkpoint`` (bertkit.training.heldout): a pre-training run's final held-out figures
exactly, transformers' BertForPreTraining / BertForMaskedLM losses on the same batches, and the
one-line refusals (no MLM head, another vocabulary)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bertkit.config import BertConfig
from bertkit.data.collate import make_collate
from bertkit.data.shards import PretrainingDataset
from bertkit.errors import CheckpointError, ConfigError
from bertkit.interop import save_pretrained
from bertkit.model import BertForMaskedLM, BertForPreTraining, BertModel
from bertkit.tokenizer import BertTokenizer
from bertkit.training.heldout import score_checkpoint
from bertkit.training.pretraining import PretrainOptions, pretrain
from bertkit.training.settings import TrainConfig
from training.helpers import prepare_tiny_corpus

BATCH = 8


@pytest.fixture(scope="module")
def static_data(tmp_path_factory) -> Path:
    return prepare_tiny_corpus(tmp_path_factory.mktemp("heldout"), docs=60, holdout=0.25)


def _save(
    cls: type, data: Path, out: Path, vocab_size: int | None = None, positions: int = 32
) -> Path:
    """A tiny random ``cls`` over the data's vocabulary (``vocab_size``: a table of another
    size; ``positions``: its max_position_embeddings), saved in the Hugging Face layout."""
    tok = BertTokenizer(data / "vocab.txt")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=vocab_size or len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=positions,
    )
    save_pretrained(cls(config), out, tokenizer=tok)
    return out


def _score(model: Path, data: Path, **kw):
    args = dict(eval_examples=2048, seed=0, batch_size=BATCH, precision="fp32", device="cpu")
    return score_checkpoint(model, data, **{**args, **kw})


def test_final_heldout_eval_of_a_pretraining_run_equals_evaluate(tmp_path) -> None:
    """Unmasked data, so the held-out masks come from the run's seed: the same seed gives the
    run's last evaluation to the bit; another seed (the negative control) other masks."""
    data = prepare_tiny_corpus(tmp_path / "d", dynamic=True, holdout=0.25)
    train = TrainConfig(batch_size=BATCH, save_every=100, log_every=1, seed=3, peak_flops=1e12)
    opts = PretrainOptions(
        data=data,
        output=tmp_path / "run",
        max_steps=6,
        learning_rate=1e-3,
        warmup_steps=1,
        train=train,
    )
    final = pretrain(opts, log=lambda _m: None).final_eval
    score = _score(tmp_path / "run" / "model", data, seed=3)
    assert {k: score.metrics[k] for k in final} == final
    assert score.objective == "mlm+nsp" and score.split == "eval" and score.notes == []
    assert score.metrics["mlm_perplexity"] == pytest.approx(math.exp(final["mlm_loss"]))
    other = _score(tmp_path / "run" / "model", data, seed=4)
    assert other.metrics["mlm_loss"] != final["mlm_loss"]


def _reference(hf_model, data: Path, nsp: bool) -> dict[str, float]:
    """transformers' losses on the batches pre-training's evaluation builds: MLM cross-entropy
    summed over every masked token, NSP over every instance."""
    ds = PretrainingDataset(data, "eval")
    collate = make_collate(ds, 0)
    sums = dict(mlm=0.0, mlm_ok=0.0, m=0.0, nsp=0.0, nsp_ok=0.0, k=0.0)
    with torch.no_grad():
        for start in range(0, len(ds), BATCH):
            b = collate([ds[i] for i in range(start, min(start + BATCH, len(ds)))])
            out = hf_model(
                input_ids=b["input_ids"],
                attention_mask=b["attention_mask"],
                token_type_ids=b["token_type_ids"],
            )
            logits = out.prediction_logits if nsp else out.logits
            keep = b["labels"] != -100
            picked, targets = logits[keep].double(), b["labels"][keep]
            sums["mlm"] += float(F.cross_entropy(picked, targets, reduction="sum"))
            sums["mlm_ok"] += float((picked.argmax(-1) == targets).sum())
            sums["m"] += float(keep.sum())
            if nsp:
                rel, y = out.seq_relationship_logits.double(), b["next_sentence_label"]
                sums["nsp"] += float(F.cross_entropy(rel, y, reduction="sum"))
                sums["nsp_ok"] += float((rel.argmax(-1) == y).sum())
                sums["k"] += len(y)
    ref = {"mlm_loss": sums["mlm"] / sums["m"], "mlm_acc": sums["mlm_ok"] / sums["m"]}
    if nsp:
        ref.update(nsp_loss=sums["nsp"] / sums["k"], nsp_acc=sums["nsp_ok"] / sums["k"])
    return ref


@pytest.mark.parametrize("head", ["BertForPreTraining", "BertForMaskedLM"])
def test_matches_transformers_on_the_same_batches(head: str, static_data, tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    ours = {"BertForPreTraining": BertForPreTraining, "BertForMaskedLM": BertForMaskedLM}[head]
    folder = _save(ours, static_data, tmp_path / head)
    hf = getattr(transformers, head).from_pretrained(folder, attn_implementation="eager").eval()
    nsp = head == "BertForPreTraining"
    ref = _reference(hf, static_data, nsp)
    score = _score(folder, static_data)
    assert score.objective == ("mlm+nsp" if nsp else "mlm")
    assert set(score.metrics) >= set(ref)
    for k, v in ref.items():
        assert score.metrics[k] == pytest.approx(v, abs=1e-5), k
    assert score.masked_tokens == sum(
        len(PretrainingDataset(static_data, "eval")[i]["masked_positions"])
        for i in range(score.examples)
    )
    if not nsp:
        assert "nsp_acc" not in score.metrics
        assert any("no NSP head" in n for n in score.notes)


def test_eval_examples_takes_the_first_instances(static_data, tmp_path) -> None:
    folder = _save(BertForPreTraining, static_data, tmp_path / "m")
    full, first = _score(folder, static_data), _score(folder, static_data, eval_examples=3)
    assert first.examples == 3 < full.examples
    assert first.masked_tokens < full.masked_tokens


def test_refuses_a_checkpoint_without_a_masked_lm_head(static_data, tmp_path) -> None:
    folder = _save(BertModel, static_data, tmp_path / "encoder")
    with pytest.raises(CheckpointError, match=r"has no masked-LM head \(BertModel.*needs one"):
        _score(folder, static_data)


def test_refuses_another_vocabulary(static_data, tmp_path) -> None:
    folder = _save(BertForPreTraining, static_data, tmp_path / "m")
    tokens = (folder / "vocab.txt").read_text().splitlines()
    tokens[7], tokens[8] = tokens[8], tokens[7]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n")
    with pytest.raises(ConfigError, match=r"id 7 is .* another vocabulary is meaningless"):
        _score(folder, static_data)


@pytest.mark.parametrize("vocab_size", [None, 99])
def test_without_vocab_txt_compares_sizes_and_says_so(vocab_size, static_data, tmp_path) -> None:
    folder = _save(BertForPreTraining, static_data, tmp_path / "m", vocab_size)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink(missing_ok=True)
    if vocab_size is None:
        score = _score(folder, static_data)
        assert any("compared vocabulary sizes only" in n for n in score.notes)
        return
    with pytest.raises(ConfigError, match=r"vocab_size 99 differs .* is meaningless"):
        _score(folder, static_data)


def test_refuses_positions_shorter_than_the_instances(static_data, tmp_path) -> None:
    """A one-line ConfigError before scoring, not the embeddings' ValueError mid-batch."""
    folder = _save(BertForPreTraining, static_data, tmp_path / "m", positions=16)
    with pytest.raises(
        ConfigError, match=r"max_position_embeddings 16 is shorter than the \d+-token"
    ):
        _score(folder, static_data)
