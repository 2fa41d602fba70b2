"""``bertkit mine`` end to end on the tiny model: its output is what ``finetune embeddings
--train`` and ``finetune rerank`` read; BEIR input and an extra corpus; one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.tasks.pairs_writer import write_pairs
from bertkit.data.tasks.retrieval import (
    LabelledPair,
    RetrievalSet,
    TrainingPair,
    read_labelled_pairs,
    read_pairs,
    write_beir,
)
from support.cli_runs import finetune

PAIRS = Path(__file__).parents[1] / "fixtures" / "retrieval_pairs.jsonl"


def mine(model: Path, *args: str) -> int:
    return main(["mine", "--model", str(model), "--precision", "fp32", *args])


def test_mined_pairs_train_embeddings(tiny_model: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "mined.jsonl"
    assert mine(tiny_model, "--input", str(PAIRS), "--output", str(out)) == 0
    summary = capsys.readouterr().err.strip().splitlines()[-1]
    assert summary.startswith("mined 32 n-tuple rows for 30 queries (32 pairs) over 32 documents")
    assert "queries/s" in summary and str(out) in summary
    mined = read_pairs(out)
    assert len(mined) == 32 and {len(p.negatives) for p in mined} == {3}
    positives: dict[str, set[str]] = {}
    for p in read_pairs(PAIRS):
        positives.setdefault(p.query, set()).add(p.positive)
    for p in mined:  # no positive of the query (it has two for some) is ever its negative
        assert not positives[p.query] & set(p.negatives)
    assert set(json.loads(out.read_text().splitlines()[0])) == {
        "query",
        "positive",
        "negative_1",
        "negative_2",
        "negative_3",
    }
    metrics = finetune(
        "embeddings", tiny_model, tmp_path / "emb", "--train", str(out), "--dev", str(PAIRS)
    )
    assert metrics["selected"]


def test_labelled_pairs_train_a_reranker(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "mined.csv"
    args = ["--input", str(PAIRS), "--output", str(out), "--output-format", "labeled-pair"]
    assert mine(tiny_model, *args, "--num-negatives", "2") == 0
    rows = read_labelled_pairs(out)
    assert sum(r.label == 1.0 for r in rows) == 32 and sum(r.label == 0.0 for r in rows) == 60
    assert len({r.group for r in rows}) == 30
    assert finetune("rerank", tiny_model, tmp_path / "rr", "--train", str(out), "--dev", str(out))


def test_a_beir_folder_and_an_extra_corpus(tiny_model: Path, tmp_path: Path) -> None:
    beir = tmp_path / "beir"
    data = RetrievalSet(
        {"d0": "red apples", "d1": "green pears", "d2": "blue sky", "d3": "grey rain"},
        {"q0": "apples", "q1": "pears"},
        {"q0": {"d0": 1}, "q1": {"d1": 1, "d2": 0}},
    )
    write_beir(beir, data, split="train")
    extra = tmp_path / "extra.txt"
    extra.write_text("yellow sun\n\nwhite snow\n")
    out = tmp_path / "triplets.tsv"
    args = ["--input", str(beir), "--corpus", str(extra), "--output", str(out)]
    assert mine(tiny_model, *args, "--output-format", "triplet", "--num-negatives", "5") == 0
    rows = read_pairs(out)
    assert len(rows) == 10 and {len(r.negatives) for r in rows} == {1}
    negatives = {r.negatives[0] for r in rows if r.query == "pears"}
    assert negatives == {"red apples", "blue sky", "grey rain", "yellow sun", "white snow"}


def test_writers_round_trip_through_the_readers(tmp_path: Path) -> None:
    pairs = [TrainingPair("q\tone", 'a, "quoted"\nline', ("n1", "n2"))]
    for suffix in ("jsonl", "csv", "tsv"):
        write_pairs(tmp_path / f"p.{suffix}", pairs)
        back = read_pairs(tmp_path / f"p.{suffix}")
        if suffix == "tsv":  # read unquoted: a tab or line break becomes a space
            assert back == [TrainingPair("q one", 'a, "quoted" line', ("n1", "n2"))]
        else:
            assert back == pairs
    from bertkit.data.tasks.pairs_writer import write_labelled_pairs

    write_labelled_pairs(
        tmp_path / "l.jsonl", [LabelledPair("q", "p", 1.0), LabelledPair("q", "n", 0.0)]
    )
    assert [json.loads(x)["label"] for x in (tmp_path / "l.jsonl").read_text().splitlines()] == [
        1,
        0,
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--num-negatives", "0"], "num negatives must be >= 1"),
        (["--range-min", "5", "--range-max", "3"], "range 5..3 holds fewer"),
        (["--output", "out.jsonl.gz"], "compressed output is not written"),
        # mine has no --format: the line does not offer one as if it had
        (["--output", "out.txt"], "(.gz, .xz, .bz2), or, for `bertkit finetune`, --format"),
        (["--input", "missing.jsonl"], "missing.jsonl"),
        (["--query-prompt-name", "query"], "query prompt name 'query' is not one of"),
    ],
)
def test_errors_are_one_line(tiny_model: Path, tmp_path: Path, capsys, args, message) -> None:
    base = {"--input": str(PAIRS), "--output": str(tmp_path / "out.jsonl")}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in base:
            base[flag] = str(tmp_path / value)
        else:
            base[flag] = value
    assert mine(tiny_model, *[x for kv in base.items() for x in kv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit mine: error: ") and message in err and "\n" not in err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_bad_record_is_named_by_file_and_line(tiny_model: Path, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "pairs.jsonl"
    bad.write_text('{"query": "a", "positive": "b"}\n{"query": "c"}\n')
    assert mine(tiny_model, "--input", str(bad), "--output", str(tmp_path / "o.jsonl")) == 1
    assert f"{bad}:2" in capsys.readouterr().err


def test_the_folders_similarity_function_is_the_default(
    tiny_model: Path, tmp_path: Path, capsys
) -> None:
    """As sentence-transformers' ``model.similarity``: a folder whose
    config_sentence_transformers.json names ``dot`` mines by dot product unless --similarity
    says otherwise; a function mining does not have (euclidean) must be overridden."""
    import shutil

    dot_model = tmp_path / "dot_model"
    shutil.copytree(tiny_model, dot_model)
    config = dot_model / "config_sentence_transformers.json"
    config.write_text(json.dumps({"similarity_fn_name": "dot"}), encoding="utf-8")
    outs = {}
    for name, model, extra in (
        ("folder", dot_model, []),
        ("dot", tiny_model, ["--similarity", "dot"]),
        ("cosine", tiny_model, []),
        ("forced", dot_model, ["--similarity", "cosine"]),
    ):
        outs[name] = tmp_path / f"{name}.jsonl"
        assert mine(model, "--input", str(PAIRS), "--output", str(outs[name]), *extra) == 0
    text = {name: path.read_text() for name, path in outs.items()}
    assert text["cosine"] != text["dot"]  # the tiny model's vectors are not unit length
    assert text["folder"] == text["dot"] and text["forced"] == text["cosine"]

    config.write_text(json.dumps({"similarity_fn_name": "hamming"}), encoding="utf-8")
    capsys.readouterr()
    assert mine(dot_model, "--input", str(PAIRS), "--output", str(tmp_path / "h.jsonl")) == 1
    err = capsys.readouterr().err
    assert "similarity_fn_name is 'hamming'" in err and "pass --similarity" in err
    assert not (tmp_path / "h.jsonl").exists()


@pytest.mark.parametrize("similarity", ["euclidean", "manhattan"])
def test_a_distance_folder_mines_its_nearest_documents(
    tiny_model: Path, tmp_path: Path, similarity: str
) -> None:
    """A folder declaring a distance mines, for each query, the documents nearest by that
    distance of the vectors as the model gives them (the tiny model's are not unit length), its
    scores the negated distances; sentence-transformers' mine_hard_negatives would normalise
    them first (docs/search.md)."""
    import shutil

    import numpy as np

    from bertkit.evaluation.pairs import pair_scores
    from bertkit.inference import Embedder

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    config = model / "config_sentence_transformers.json"
    config.write_text(json.dumps({"similarity_fn_name": similarity}), encoding="utf-8")
    out = tmp_path / "mined.jsonl"
    assert mine(model, "--input", str(PAIRS), "--output", str(out), "--output-scores") == 0
    pairs = read_pairs(PAIRS)
    docs = list(dict.fromkeys(p.positive for p in pairs))
    positives: dict[str, set[str]] = {}
    for p in pairs:
        positives.setdefault(p.query, set()).add(p.positive)
    embedder = Embedder.load(model, precision="fp32")
    d_vecs = embedder(docs)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 32
    for row in rows:
        q = embedder([row["query"]])
        distance = pair_scores(np.repeat(q, len(docs), 0), d_vecs, similarity)
        nearest = [
            docs[i]
            for i in np.argsort(distance, kind="stable")
            if docs[i] not in positives[row["query"]] and docs[i] != row["query"]
        ][:3]
        assert [row[f"negative_{i}"] for i in (1, 2, 3)] == nearest
        expected = [row["positive"], *nearest]
        want = [-float(distance[docs.index(t)]) for t in expected]
        assert row["scores"] == pytest.approx(want, rel=1e-5)
    cosine = tmp_path / "cosine.jsonl"
    args = ["--input", str(PAIRS), "--output", str(cosine), "--similarity", "cosine"]
    assert mine(model, *args) == 0
    assert [json.loads(x)["negative_1"] for x in cosine.read_text().splitlines()] != [
        r["negative_1"] for r in rows
    ]  # the distance ranks otherwise than cosine here


def test_labelled_scores_need_a_sigmoid_cross_encoder(tiny_model: Path, tmp_path: Path, capsys):
    """labeled-pair rows with --output-scores are soft labels for finetune rerank, which reads
    them in [0, 1]: the bi-encoder's similarities (negative, or over 1 by dot) are refused
    before mining, and nothing is written."""
    out = tmp_path / "l.jsonl"
    args = ["--input", str(PAIRS), "--output", str(out), "--output-format", "labeled-pair"]
    assert mine(tiny_model, *args, "--output-scores") == 1
    err = capsys.readouterr().err
    assert "needs a --cross-encoder with a sigmoid" in err and "bi-encoder similarities" in err
    assert not out.exists()
