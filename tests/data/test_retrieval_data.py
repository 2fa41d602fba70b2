"""Retrieval data: BEIR folders in and out, pairs and triples, labelled pairs, SQuAD split by
article; bad records name the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.data.tasks.retrieval import (
    RetrievalSet,
    TrainingPair,
    is_beir,
    pairs_as_retrieval,
    read_beir,
    read_labelled_pairs,
    read_pairs,
    retrieval_pairs,
    squad_retrieval,
    write_beir,
)
from bertkit.data.tasks.squad import read_squad
from bertkit.errors import InputError, MissingFileError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_beir_round_trip_and_title_joined_to_text(tmp_path):
    data = RetrievalSet(
        {"d1": "alpha", "d2": "beta"}, {"q1": "a?", "q2": "unjudged"}, {"q1": {"d2": 1}}
    )
    write_beir(tmp_path / "b", data, "dev")
    assert is_beir(tmp_path / "b") and not is_beir(tmp_path)
    back = read_beir(tmp_path / "b", "dev")
    assert back == data and back.judged() == ["q1"]
    _jsonl(
        tmp_path / "b" / "corpus.jsonl",
        [{"_id": "d1", "title": "T", "text": "x"}, {"_id": "d2", "text": "y"}],
    )
    assert read_beir(tmp_path / "b", "dev").corpus == {"d1": "T x", "d2": "y"}


def test_beir_errors_name_file_and_line(tmp_path):
    write_beir(tmp_path, RetrievalSet({"d1": "a"}, {"q1": "b"}, {"q1": {"d1": 1}}), "test")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td9\t1\n")
    with pytest.raises(InputError, match=r"test\.tsv.*2.*'d9' is not in corpus"):
        read_beir(tmp_path, "test")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\n")
    with pytest.raises(InputError, match="expected query-id, corpus-id, score"):
        read_beir(tmp_path, "test")
    with pytest.raises(MissingFileError, match=r"qrels/dev\.tsv \(splits here: \['test'\]\)"):
        read_beir(tmp_path, "dev")


def test_pairs_and_triples_in_jsonl_csv_and_tsv(tmp_path):
    j = _jsonl(tmp_path / "p.jsonl", [{"anchor": "q", "positive": "p", "negatives": ["n1", "n2"]}])
    assert read_pairs(j) == [TrainingPair("q", "p", ("n1", "n2"))]
    c = tmp_path / "p.csv"
    c.write_text('query,positive,negative_1,negative_2\n"q, one",p,n1,n2\n', encoding="utf-8")
    assert read_pairs(c) == [TrainingPair("q, one", "p", ("n1", "n2"))]
    t = tmp_path / "p.tsv"
    t.write_text("question\tdocument\nq\tp\n", encoding="utf-8")
    assert read_pairs(t) == [TrainingPair("q", "p")]


def test_pairs_errors(tmp_path):
    bad = _jsonl(
        tmp_path / "a.jsonl",
        [{"query": "q", "positive": "p", "negative": "n"}, {"query": "q", "positive": "p"}],
    )
    with pytest.raises(InputError, match=r"a\.jsonl:2: 0 negatives; the first record has 1"):
        read_pairs(bad)
    missing = _jsonl(tmp_path / "b.jsonl", [{"query": "q", "answer": "p"}])
    with pytest.raises(
        InputError, match=r"b\.jsonl:1: expected a non-empty field named one of positive"
    ):
        read_pairs(missing)


def test_labelled_pairs_and_triples_expanded(tmp_path):
    rows = [
        {"query": "q1", "passage": "a", "label": 1},
        {"query": "q1", "passage": "b", "label": 0.25},
        {"query": "q2", "positive": "c", "negative": "d"},
    ]
    got = read_labelled_pairs(_jsonl(tmp_path / "l.jsonl", rows))
    assert [(p.query, p.passage, p.label, p.group) for p in got] == [
        ("q1", "a", 1.0, 0),
        ("q1", "b", 0.25, 0),
        ("q2", "c", 1.0, 1),
        ("q2", "d", 0.0, 1),
    ]
    bad = _jsonl(tmp_path / "m.jsonl", [{"query": "q", "passage": "a", "label": 3}])
    with pytest.raises(InputError, match=r"m\.jsonl:1: label 3.0 is outside \[0, 1\]"):
        read_labelled_pairs(bad)


def test_pairs_as_retrieval_dedupes_texts():
    got = pairs_as_retrieval(
        [TrainingPair("q", "p", ("n",)), TrainingPair("q", "p2"), TrainingPair("r", "p")]
    )
    assert got.corpus == {"d0": "p", "d1": "n", "d2": "p2"}
    assert got.queries == {"q0": "q", "q1": "r"}
    assert got.qrels == {"q0": {"d0": 1, "d2": 1}, "q1": {"d0": 1}}


def test_squad_split_by_article():
    examples = read_squad(FIXTURES / "task_squad_v1.json")
    first, rest = squad_retrieval(examples, 1)
    titles = list(dict.fromkeys(e.title for e in examples))
    assert set(first.queries) == {e.qas_id for e in examples if e.title == titles[0]}
    assert set(rest.queries) == {e.qas_id for e in examples if e.title != titles[0]}
    assert not set(first.corpus) & set(rest.corpus)
    for e in examples:
        s = first if e.qas_id in first.queries else rest
        (doc,) = s.qrels[e.qas_id]
        assert s.corpus[doc] == e.context
    assert retrieval_pairs(first)[0] == TrainingPair(
        first.queries[next(iter(first.queries))], first.corpus["p0"]
    )
    with pytest.raises(InputError, match=r"train_articles must be in 1\.\.1"):
        squad_retrieval(examples, 2)


def test_beir_qrels_judging_nothing_relevant(tmp_path):
    """qrels with a header alone (or only scores of 0) ended ``bertkit evaluate`` in a
    ValueError traceback from the metrics ("no query has a relevant document")."""
    write_beir(tmp_path, RetrievalSet({"d1": "a"}, {"q1": "b"}, {"q1": {"d1": 1}}), "test")
    qrels = tmp_path / "qrels" / "test.tsv"
    for body in ("", "q1\td1\t0\n"):
        qrels.write_text("query-id\tcorpus-id\tscore\n" + body)
        with pytest.raises(InputError, match=rf"{qrels}: no judgement with a score above 0"):
            read_beir(tmp_path, "test")


def test_beir_qrels_scores_are_integer_grades(tmp_path):
    """A fractional score was truncated (0.5 read as 0, the judgement silently irrelevant); it is
    refused with the file and line, while "2.0" is grade 2 and a graded score stays whole."""
    write_beir(tmp_path, RetrievalSet({"d1": "a", "d2": "c"}, {"q1": "b"}, {"q1": {"d1": 1}}))
    qrels = tmp_path / "qrels" / "test.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t2.0\nq1\td2\t3\n")
    assert read_beir(tmp_path).qrels == {"q1": {"d1": 2, "d2": 3}}
    for bad in ("0.5", "nan", "inf"):
        qrels.write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t{bad}\n")
        with pytest.raises(InputError, match=rf"{qrels}:3: score '{bad}' is not an integer"):
            read_beir(tmp_path)
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\thigh\n")
    with pytest.raises(InputError, match=r"test\.tsv:2: score 'high' is not a number"):
        read_beir(tmp_path)
