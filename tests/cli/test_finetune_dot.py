"""A dot-product bi-encoder end to end: ``finetune embeddings --similarity-fn-name dot
--no-normalize`` trains on dot products at scale 1 (sentence-transformers'
MultipleNegativesRankingLoss with ``dot_score``), saves a folder that declares ``dot`` and has no
Normalize, selects by the dot-product search that ``bertkit evaluate`` runs again, and stays a dot
model when fine-tuned again from that folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.tasks.retrieval import pairs_as_retrieval, read_pairs, write_beir
from support.cli_runs import FAST, evaluate, finetune

FIXTURES = Path(__file__).parents[1] / "fixtures"
PAIRS, STS = FIXTURES / "retrieval_pairs.jsonl", FIXTURES / "sts_pairs.csv"


@pytest.fixture
def losses(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, bool]]:
    """The (scale, cosine) of every ranking loss the bi-encoder computes."""
    import bertkit.model.contrastive as contrastive

    seen: list[tuple[float, bool]] = []
    real = contrastive.ranking_loss

    def spy(q, c, scale=20.0, symmetric=False, cosine=True):
        seen.append((scale, cosine))
        return real(q, c, scale, symmetric, cosine)

    monkeypatch.setattr(contrastive, "ranking_loss", spy)
    return seen


def _declared(folder: Path) -> tuple[str, bool]:
    """(the folder's similarity_fn_name, whether it has a Normalize module)."""
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    modules = json.loads((folder / "modules.json").read_text())
    return config["similarity_fn_name"], any(m["type"].endswith("Normalize") for m in modules)


def test_a_dot_product_bi_encoder_end_to_end(
    tiny_model: Path, tmp_path: Path, losses: list[tuple[float, bool]]
) -> None:
    dev = tmp_path / "dev_beir"
    write_beir(dev, pairs_as_retrieval(read_pairs(PAIRS)), split="dev")
    data = ["--train", str(PAIRS), "--dev", str(dev)]
    dot = tmp_path / "dot"
    metrics = finetune(
        "embeddings", tiny_model, dot, *data, "--similarity-fn-name", "dot", "--no-normalize"
    )
    assert losses and set(losses) == {(1.0, False)}
    assert _declared(dot) == ("dot", False)
    ours = evaluate(dot, dev, tmp_path, "--precision", "fp32", "--split", "dev")["retrieval"]
    assert ours["MRR@10"] == pytest.approx(metrics["selected"]["dev"]["dev"]["MRR@10"], abs=1e-6)

    losses.clear()  # from the dot folder, no flags: it stays a dot model
    finetune("embeddings", dot, tmp_path / "again", *data)
    assert set(losses) == {(1.0, False)}
    assert _declared(tmp_path / "again") == ("dot", False)

    losses.clear()  # told to normalise, a cosine model (unit vectors' dot product is a cosine)
    finetune("embeddings", dot, tmp_path / "unit", *data, "--normalize")
    assert set(losses) == {(20.0, True)}
    assert _declared(tmp_path / "unit") == ("cosine", True)


def test_dot_on_a_normalising_model_is_refused_before_training(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["finetune", "embeddings", "--model", str(tiny_model), "--output", str(out), *FAST]
    argv += ["--train", str(PAIRS), "--dev", str(PAIRS), "--similarity-fn-name", "dot"]
    assert main(argv) != 0
    assert "the dot product of unit vectors is their cosine): add --no-normalize" in (
        capsys.readouterr().err
    )
    assert not (out / "metrics.json").exists()


def test_a_euclidean_folder_stays_euclidean_and_selects_as_evaluate_scores_it(
    tiny_model: Path, tmp_path: Path, losses: list[tuple[float, bool]]
) -> None:
    """sentence-transformers' ``fit`` keeps a model's ``similarity_fn_name`` while its ranking
    loss scores by cosine: a start folder that declares euclidean trains by cosine at scale 20,
    is saved declaring euclidean, and labelled dev pairs select by ``spearman_euclidean``, the
    main metric ``bertkit evaluate`` gives the saved folder. A similarity the job names wins."""
    start = tmp_path / "start"
    finetune("embeddings", tiny_model, start, "--train", str(PAIRS), "--dev", str(PAIRS))
    config = start / "config_sentence_transformers.json"
    config.write_text(
        json.dumps(json.loads(config.read_text()) | {"similarity_fn_name": "euclidean"})
    )
    losses.clear()
    data = ["--train", str(PAIRS), "--dev", str(STS)]
    metrics = finetune("embeddings", start, tmp_path / "kept", *data)
    assert set(losses) == {(20.0, True)}
    assert _declared(tmp_path / "kept") == ("euclidean", True)
    selected = metrics["selected"]
    assert selected["score"] == selected["dev"]["dev"]["spearman_euclidean"]
    ours = evaluate(tmp_path / "kept", STS, tmp_path, "--precision", "fp32")
    assert ours["main_metric"] == "spearman_euclidean"
    assert ours["spearman_euclidean"] == pytest.approx(selected["score"], abs=1e-6)

    finetune("embeddings", start, tmp_path / "told", *data, "--similarity-fn-name", "cosine")
    assert _declared(tmp_path / "told") == ("cosine", True)
