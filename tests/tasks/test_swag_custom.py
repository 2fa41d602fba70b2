"""SWAG CSV and the generic CSV/TSV/JSONL readers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.data.tasks.custom import detect_format, read_classification, read_tagging
from bertkit.data.tasks.swag import read_swag
from bertkit.errors import InputError

FIXTURES = Path(__file__).parent.parent / "fixtures"
SWAG_HEADER = (
    "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
)


def test_swag_reads_quoted_fields():
    ex = read_swag(FIXTURES / "task_swag.csv")
    assert [e.label for e in ex] == [0, 1, 2]
    assert [e.line for e in ex] == [2, 3, 4]
    last = ex[2]
    assert last.start == "Then, she"
    assert last.endings[3] == 'paints the ceiling, "quickly".'
    assert last.choices()[2] == ("The chef slices an onion.", "Then, she adds it to the hot pan.")


def test_swag_without_label_column(tmp_path):
    p = tmp_path / "test.csv"
    p.write_text(SWAG_HEADER.replace(",label", "") + "v,1,s,Ctx.,He,gold,a,b,c,d\n")
    (e,) = read_swag(p)
    assert e.label is None and e.endings == ("a", "b", "c", "d")


@pytest.mark.parametrize(
    ("body", "line", "expected"),
    [
        ("v,1,s,Ctx.,He,gold,a,b,c,d,4\n", 2, "expected a label in {0, 1, 2, 3}, got '4'"),
        (
            "v,1,s,Ctx.,He,gold,a,b,c,d,0\nv,2,s,Ctx.,He,gold,a,b,c,0\n",
            3,
            "expected 11 comma-separated fields, got 10",
        ),
        ("v,1,s,Ctx.,He,gold,a,,c,d,0\n", 2, "expected four non-empty endings"),
        ('v,1,s,"Ctx.\nmore",He,gold,a,b,c,d,x\n', 2, "expected a label in {0, 1, 2, 3}, got 'x'"),
    ],
)
def test_swag_malformed(tmp_path, body, line, expected):
    p = tmp_path / "bad.csv"
    p.write_text(SWAG_HEADER + body)
    with pytest.raises(InputError) as info:
        read_swag(p)
    assert str(info.value).startswith(f"{p}:{line}: ") and expected in str(info.value)


def test_swag_header_missing_columns(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("sent1,sent2,ending0,label\nA,B,c,0\n")
    with pytest.raises(
        InputError, match=r"bad\.csv:1: expected a SWAG header .* missing ending1, ending2, ending3"
    ):
        read_swag(p)


def test_custom_csv_pairs_with_label_list(tmp_path):
    p = tmp_path / "train.csv"
    p.write_text(
        'premise,hypothesis,verdict\n"A man, smiling.",He smiles.,yes\nIt rains.,It is dry.,no\n'
    )
    data = read_classification(p, text="premise", text_pair="hypothesis", label="verdict")
    assert data.labels == ["no", "yes"]
    assert [(e.text_a, e.text_b, e.label, e.line) for e in data.examples] == [
        ("A man, smiling.", "He smiles.", 1, 2),
        ("It rains.", "It is dry.", 0, 3),
    ]
    dev = tmp_path / "dev.csv"
    dev.write_text("premise,hypothesis,verdict\nX.,Y.,maybe\n")
    with pytest.raises(
        InputError, match=r"dev\.csv:2: expected a 'verdict' in \{no, yes\}, got 'maybe'"
    ):
        read_classification(
            dev, text="premise", text_pair="hypothesis", label="verdict", labels=data.labels
        )


def test_custom_tsv_keeps_quotes_and_regression(tmp_path):
    p = tmp_path / "train.tsv"
    p.write_text('text\tscore\n"unbalanced quote\t0.5\nplain\t2\n')
    data = read_classification(p, text="text", label="score", regression=True)
    assert [(e.text_a, e.label) for e in data.examples] == [
        ('"unbalanced quote', 0.5),
        ("plain", 2.0),
    ]
    assert data.labels == []


def test_custom_jsonl_numbers_and_unlabelled(tmp_path):
    p = tmp_path / "train.jsonl"
    p.write_text('{"review": "great", "stars": 5}\n\n{"review": "bad", "stars": 1.0}\n')
    data = read_classification(p, text="review", label="stars")
    assert data.labels == ["1", "5"] and [e.label for e in data.examples] == [1, 0]
    assert [e.line for e in data.examples] == [1, 3]
    unl = read_classification(p, text="review", label=None)
    assert [e.label for e in unl.examples] == [None, None]


LABEL = "expected a non-empty string or number in 'stars'"


@pytest.mark.parametrize(
    ("name", "text", "line", "expected"),
    [
        (
            "a.jsonl",
            '{"review": "ok", "stars": 1}\n{"review": "x", \n',
            2,
            "invalid JSON at column",
        ),
        ("a.jsonl", '{"review": "ok"}\n', 1, "missing field 'stars'"),
        ("a.jsonl", '["ok", 1]\n', 1, "expected a JSON object, got list"),
        ("a.jsonl", '{"review": "", "stars": 1}\n', 1, "expected a non-empty text in 'review'"),
        ("a.csv", "review,stars\nok,1,extra\n", 2, "expected 2 CSV fields, got 3"),
        ("a.csv", "text,stars\nok,1\n", 1, "expected a header with the column(s) review"),
        ("a.csv", 'review,stars\n"ok"x,1\n', 2, "malformed CSV"),
        # values that parse but cannot be labels
        *(
            (
                "a.jsonl",
                f'{{"review": "ok", "stars": "pos"}}\n{{"review": "x", "stars": {y}}}\n',
                2,
                f"{LABEL}, got {got}",
            )
            for y, got in (('["neg"]', "['neg']"), ("null", "None"), ('{"a": 1}', "{'a': 1}"))
        ),
        ("a.csv", "review,stars\nok,pos\nx,\n", 3, f"{LABEL}, got ''"),
    ],
)
def test_custom_malformed(tmp_path, name, text, line, expected):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(InputError) as info:
        read_classification(p, text="review", label="stars")
    assert str(info.value).startswith(f"{p}:{line}: ") and expected in str(info.value)


def test_unknown_extension(tmp_path):
    with pytest.raises(InputError, match="cannot tell the format"):
        read_classification(tmp_path / "a.txt", text="t")
    with pytest.raises(InputError, match="cannot tell the format"):
        read_classification(tmp_path / "a.txt.gz", text="t")


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("a.csv", "csv"),
        ("a.CSV.gz", "csv"),
        ("a.tsv.bz2", "tsv"),
        ("a.jsonl.xz", "jsonl"),
        ("a.json.gz", "jsonl"),
        ("a.ndjson.bz2", "jsonl"),
    ],
)
def test_the_format_looks_through_a_compression_suffix(tmp_path, name, fmt):
    """``bertkit finetune classify --train x.csv.gz`` was "cannot tell the format from the
    extension", though the line reader decompresses .gz, .xz and .bz2."""
    import bz2
    import gzip
    import lzma

    assert detect_format(tmp_path / name) == fmt
    rows = {
        "csv": "review,stars\ngreat,5\nbad,1\n",
        "tsv": "review\tstars\ngreat\t5\nbad\t1\n",
        "jsonl": '{"review": "great", "stars": 5}\n{"review": "bad", "stars": 1}\n',
    }[fmt].encode()
    suffix = name.rsplit(".", 1)[-1].lower()
    compress = {"gz": gzip.compress, "xz": lzma.compress, "bz2": bz2.compress}.get(suffix)
    path = tmp_path / name
    path.write_bytes(compress(rows) if compress else rows)
    data = read_classification(path, text="review", label="stars")
    first = 1 if fmt == "jsonl" else 2  # CSV/TSV: line 1 is the header
    assert [(e.text_a, e.label, e.line) for e in data.examples] == [
        ("great", 1, first),
        ("bad", 0, first + 1),
    ]
    assert data.labels == ["1", "5"]


def test_tagging_jsonl_and_csv(tmp_path):
    j = tmp_path / "t.jsonl"
    j.write_text(
        json.dumps({"words": ["Anna", "met", "Bo"], "ner": ["I-PER", "O", "I-PER"]}) + "\n"
    )
    (s,) = read_tagging(j, tokens="words", tags="ner")
    assert s.tokens == ("Anna", "met", "Bo") and s.tags == ("B-PER", "O", "B-PER")
    c = tmp_path / "t.csv"
    c.write_text("tokens,tags\nNew York rocks,B-LOC I-LOC O\n")
    (s,) = read_tagging(c)
    assert s.tags == ("B-LOC", "I-LOC", "O")


@pytest.mark.parametrize(
    ("rec", "expected"),
    [
        (
            {"tokens": ["a", "b"], "tags": ["O"]},
            "expected 'tags' to list one tag per token (2), got 1",
        ),
        ({"tokens": [], "tags": []}, "expected 'tokens' to be a non-empty list of strings"),
        ({"tokens": ["a"], "tags": ["PER"]}, "expected tags O, B-TYPE or I-TYPE, got 'PER'"),
        ({"tokens": ["a"]}, "missing field 'tags'"),
    ],
)
def test_tagging_malformed(tmp_path, rec, expected):
    p = tmp_path / "t.jsonl"
    p.write_text('{"tokens": ["ok"], "tags": ["O"]}\n' + json.dumps(rec) + "\n")
    with pytest.raises(InputError) as info:
        read_tagging(p)
    assert str(info.value).startswith(f"{p}:2: ") and expected in str(info.value)
