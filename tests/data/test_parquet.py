"""Parquet corpora (``--format parquet``, or detected by its magic bytes): the same instances as
the same documents in JSONL, streamed by row batches; bad files give one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from bertkit.cli.main import main  # noqa: E402
from bertkit.data import corpus  # noqa: E402
from bertkit.data.shards import PretrainingDataset  # noqa: E402

FIX = Path(__file__).resolve().parents[1] / "fixtures"
VOCAB = FIX / "pt_vocab.txt"


def _docs() -> list[str]:
    lines = (FIX / "pt_docs.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(x)["body"] for x in lines if x.strip()]


def _prepare(src: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "prepare-pretraining",
            "--input",
            str(src),
            "--vocab",
            str(VOCAB),
            "--output",
            str(out),
            "--max-seq-length",
            "32",
            "--dupe-factor",
            "2",
            "--seed",
            "5",
            "--num-workers",
            "1",
            *extra,
        ]
    )


def test_parquet_gives_the_same_instances_as_jsonl(tmp_path: Path, monkeypatch) -> None:
    docs = _docs()
    table = pa.table({"id": list(range(len(docs))), "text": docs})
    pq.write_table(table, tmp_path / "c.parquet", row_group_size=2)  # several row groups
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    monkeypatch.setattr(corpus, "PARQUET_BATCH_ROWS", 1)  # stream row by row
    assert corpus.detect_format(tmp_path / "c.parquet") == "parquet"
    assert _prepare(tmp_path / "c.parquet", tmp_path / "p") == 0  # auto-detected
    assert _prepare(tmp_path / "c.jsonl", tmp_path / "j") == 0
    a, b = PretrainingDataset(tmp_path / "p"), PretrainingDataset(tmp_path / "j")
    assert len(a) == len(b) > 0
    for i in range(len(a)):
        assert np.array_equal(a[i]["input_ids"], b[i]["input_ids"])
        assert a[i]["next_sentence_label"] == b[i]["next_sentence_label"]
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert manifest["inputs"][0]["format"] == "parquet"


def test_parquet_text_field_nulls_and_errors(tmp_path: Path, capsys) -> None:
    docs = _docs()
    pq.write_table(pa.table({"body": [docs[0], None, docs[1]]}), tmp_path / "b.parquet")
    got = list(corpus.read_documents([tmp_path / "b.parquet"], "parquet", text_field="body"))
    assert len(got) == 2  # the null row is skipped
    assert _prepare(tmp_path / "b.parquet", tmp_path / "o", "--format", "parquet") == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(
        f"bertkit prepare-pretraining: error: {tmp_path / 'b.parquet'}: expected a string column 'text'"
    )
    assert "['body']" in err and not (tmp_path / "o").exists()
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "n.parquet")
    with pytest.raises(Exception, match="row 1: expected a string in column 'text', got int"):
        list(corpus.read_documents([tmp_path / "n.parquet"], "parquet"))
    (tmp_path / "x.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(Exception, match="not a readable Parquet file"):
        list(corpus.read_documents([tmp_path / "x.parquet"], "parquet"))
