"""``bertkit finetune embeddings --dev LABELLED_PAIRS``: an STS file or a 0/1 paraphrase file as
dev selects on ``bertkit evaluate``'s main metric for it (spearman_cosine / cosine_ap), the dev
score of the selected epoch is what ``bertkit evaluate`` gives the saved folder on that file;
``--pair-kind`` forces what the pairs are scored as (and so the metric that selects); a dev file
that is neither layout, or both, is refused in one line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.tasks.dev_layout import dev_layout
from bertkit.errors import InputError
from bertkit.tasks.embedding import EmbeddingAdapter
from support.tiny_glue import FIXTURES

TRAIN = FIXTURES / "retrieval_pairs.jsonl"
RUN = [
    "--epochs",
    "2",
    "--batch-size",
    "8",
    "--learning-rate",
    "1e-3",
    "--precision",
    "fp32",
    "--max-seq-length",
    "16",
]


def _finetune(tiny_model: Path, dev: Path, out: Path, *extra: str) -> int:
    args = ["finetune", "embeddings", "--model", str(tiny_model), "--train", str(TRAIN)]
    return main([*args, "--dev", str(dev), "--output", str(out), *RUN, *extra])


@pytest.mark.parametrize(
    ("name", "kind", "metric", "extra"),
    [
        ("sts_pairs.csv", "sts", "spearman_cosine", ()),
        ("paraphrase_pairs.jsonl", "pair_classification", "cosine_ap", ()),
        # 0/1 labels forced to sts: Spearman selects, and evaluate is told the same kind
        ("paraphrase_pairs.jsonl", "sts", "spearman_cosine", ("--pair-kind", "sts")),
    ],
)
def test_labelled_pairs_select_on_what_evaluate_scores(
    tiny_model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    name: str,
    kind: str,
    metric: str,
    extra: tuple[str, ...],
) -> None:
    dev, out = FIXTURES / name, tmp_path / "emb"
    assert _finetune(tiny_model, dev, out, *extra) == 0
    log = capsys.readouterr().err
    assert f"dev {metric} " in log  # the epoch lines name the metric that selects
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["metric"] == metric
    assert [len(r["epochs"]) for r in metrics["runs"]] == [2]
    selected = metrics["selected"]
    epoch = metrics["runs"][0]["epochs"][selected["epoch"] - 1]
    assert selected["score"] == epoch["dev"]["dev"][metric]

    report = tmp_path / "evaluate.json"
    args = ["--output", str(report), "--precision", "fp32", *extra]
    assert main(["evaluate", "--model", str(out), "--data", str(dev), *args]) == 0
    evaluated = json.loads(report.read_text())
    assert (evaluated["kind"], evaluated["main_metric"]) == (kind, metric)
    assert evaluated[metric] == pytest.approx(selected["score"], abs=1e-6)  # exact on CPU
    # every metric of the similarity, not only the main one (thresholds are scores: 1e-5)
    for key, value in evaluated["metrics"].items():
        assert value == pytest.approx(selected["dev"]["dev"][key], abs=1e-5), key


def test_dev_layout_tells_retrieval_from_labelled_pairs(tmp_path: Path) -> None:
    assert dev_layout(FIXTURES / "retrieval_pairs.jsonl") == "retrieval"
    assert dev_layout(FIXTURES / "sts_pairs.csv") == "pairs"
    assert dev_layout(FIXTURES / "paraphrase_pairs.jsonl") == "pairs"
    # "question" is a query field, but "sentence" is no positive: QNLI-style labelled pairs
    qnli = tmp_path / "qnli.jsonl"
    qnli.write_text(json.dumps({"question": "q?", "sentence": "s.", "label": 1}) + "\n")
    assert dev_layout(qnli) == "pairs"
    # a (query, passage, label) file is rerank's labelled pairs: retrieval pairs here, as before
    rerank = tmp_path / "rerank.jsonl"
    rerank.write_text(json.dumps({"query": "q", "passage": "p", "label": 1}) + "\n")
    assert dev_layout(rerank) == "retrieval"
    # a text pair without a label is no labelled pair
    unlabelled = tmp_path / "unlabelled.csv"
    unlabelled.write_text("sentence1,sentence2\na,b\n")
    adapter = EmbeddingAdapter("embeddings", "x")
    with pytest.raises(InputError, match=r"unlabelled\.csv:1: expected a dev file of"):
        adapter.read(unlabelled, "dev")


@pytest.mark.parametrize(
    ("record", "says"),
    [
        (
            {"query": "q", "positive": "p", "sentence1": "a", "sentence2": "b", "score": 1.5},
            "ambiguous dev file",
        ),
        ({"anchor": "a", "text": "t", "label": 1}, "expected a dev file of"),
    ],
)
def test_an_ambiguous_or_unknown_dev_file_is_refused_in_one_line(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture, record: dict, says: str
) -> None:
    dev = tmp_path / "dev.jsonl"
    dev.write_text(json.dumps(record) + "\n")
    assert _finetune(tiny_model, dev, tmp_path / "out") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(dev) in err[0] and says in err[0], err
    assert not (tmp_path / "out").exists()


def test_the_dev_kind_is_not_saved_with_the_adapter() -> None:
    adapter = EmbeddingAdapter("embeddings", "x")
    adapter.read(FIXTURES / "sts_pairs.csv", "dev")
    assert adapter.main_metric == "spearman_cosine"
    assert "_dev_kind" not in adapter.state()
    assert EmbeddingAdapter.from_state(
        {k: v for k, v in adapter.state().items() if k != "format"}
    ).main_metric == ("MRR@10")


def test_a_pair_kind_that_cannot_apply_is_refused_in_one_line(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """pair_classification forced on gold scores names the file and the first score that is
    not 0 or 1; a pair kind with a retrieval dev set, or for a BEIR evaluation, is refused
    rather than ignored."""
    sts = FIXTURES / "sts_pairs.csv"
    forced = ("--pair-kind", "pair_classification")
    assert _finetune(tiny_model, sts, tmp_path / "out", *forced) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{sts}:2: pair kind pair_classification needs every label" in err[0]
    assert "got 4.8" in err[0]
    assert _finetune(tiny_model, TRAIN, tmp_path / "out", "--pair-kind", "sts") == 1
    err = capsys.readouterr().err
    assert (
        f"error: --pair-kind sts scores labelled sentence pairs; the dev set {TRAIN} is retrieval"
        in err
    )
    assert not (tmp_path / "out").exists()
    args = ["evaluate", "--model", str(tiny_model), "--data", str(sts), *forced]
    assert main(args) == 1
    assert f"{sts}:2: pair kind pair_classification" in capsys.readouterr().err
    from bertkit.data.tasks.retrieval import pairs_as_retrieval, read_pairs, write_beir

    beir = tmp_path / "beir"
    write_beir(beir, pairs_as_retrieval(read_pairs(TRAIN)), split="dev")
    args = ["evaluate", "--model", str(tiny_model), "--data", str(beir), "--pair-kind", "sts"]
    assert main(args) == 1
    assert (
        "--pair-kind sts applies to an embedding model scored on labelled sentence pairs, "
        "not to retrieval on a BEIR folder" in capsys.readouterr().err
    )


def test_a_pairs_file_dev_set_is_searched_by_evaluate_as_training_searched_it(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A (query, positive[, negatives]) dev file selects on MRR@10 of a search over its
    positives and negatives; ``evaluate`` on that file runs the same search (before, it read
    the file as labelled pairs and refused it)."""
    out = tmp_path / "emb"
    assert _finetune(tiny_model, TRAIN, out) == 0
    selected = json.loads((out / "metrics.json").read_text())["selected"]["dev"]["dev"]
    report = tmp_path / "evaluate.json"
    args = ["--data", str(TRAIN), "--output", str(report), "--precision", "fp32"]
    assert main(["evaluate", "--model", str(out), *args]) == 0
    assert "against" in capsys.readouterr().err  # "scored N queries against M documents"
    retrieval = json.loads(report.read_text())["retrieval"]
    for metric in ("MRR@10", "NDCG@10", "Recall@10"):
        assert retrieval[metric] == pytest.approx(selected[metric], abs=1e-6), metric
