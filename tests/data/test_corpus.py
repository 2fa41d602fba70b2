"""Corpus readers (four formats, auto-detection), the sentence splitter, and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.data.corpus import detect_format, read_documents, split_sentences
from bertkit.errors import InputError
from support.corpus_fixtures import FORMAT_FIXTURES

FIX = Path(__file__).resolve().parents[1] / "fixtures"

FIRST_DOC = [
    "The River Alder is a short river in the north of the county.",
    "It rises on open moorland and flows west for 12.5 miles before it joins the sea.",
    "Its valley was settled early, e.g. by farmers in the Bronze Age.",
    "Mr. J. R. Hobson surveyed the river in 1851.",
    "He reported that the water was clear.",
    '"The fish are many," he wrote.',
    "(His notes survive in the county archive.)",
    "They are often quoted.",
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
        # titles and listed abbreviations
        ("Mr. Smith met Dr. Jones. They talked.", ["Mr. Smith met Dr. Jones.", "They talked."]),
        (
            "See Fig. 3 and No. 5 on Jan. 4 here. Done.",
            ["See Fig. 3 and No. 5 on Jan. 4 here.", "Done."],
        ),
        # initials and dotted abbreviations
        ("J. R. R. Tolkien wrote it. It sold.", ["J. R. R. Tolkien wrote it.", "It sold."]),
        ("George W. Bush spoke. Then he left.", ["George W. Bush spoke.", "Then he left."]),
        ("Cities, e.g. Paris, i.e. France. Next.", ["Cities, e.g. Paris, i.e. France.", "Next."]),
        (
            "He moved to the U.S. Army base. It was big.",
            ["He moved to the U.S. Army base.", "It was big."],
        ),
        # decimals, versions, lower-case continuation
        ("Pi is 3.14 and v2.0 works. Yes.", ["Pi is 3.14 and v2.0 works.", "Yes."]),
        ("It cost 5 dollars etc. and more. Fine.", ["It cost 5 dollars etc. and more.", "Fine."]),
        # quotes and brackets after the period, openers before the next sentence
        ('He said "Stop." Then he ran.', ['He said "Stop."', "Then he ran."]),
        (
            "It rained. (The roads flooded.) Later it cleared.",
            ["It rained.", "(The roads flooded.)", "Later it cleared."],
        ),
        ('End. "Quoted start," she said.', ["End.", '"Quoted start," she said.']),
        ("Born in 1950. 1960 was worse.", ["Born in 1950.", "1960 was worse."]),
        ("Wait... What? Really?! Yes.", ["Wait...", "What?", "Really?!", "Yes."]),
        ("Ünïcode sentence. Émile came.", ["Ünïcode sentence.", "Émile came."]),
        ("  ", []),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


@pytest.mark.parametrize(("name", "fmt"), FORMAT_FIXTURES)
def test_each_format_reads_the_same_documents(name: str, fmt: str) -> None:
    assert detect_format(FIX / name) == fmt
    kwargs = {"text_field": "body"} if fmt == "jsonl" else {}
    for chosen in ("auto", fmt):
        docs = list(read_documents([FIX / name], chosen, **kwargs))
        assert [len(d) for d in docs] == [8, 6, 6, 6, 6, 6]
        assert docs[0] == FIRST_DOC
        assert docs[1][0] == "Alder Mill is a water mill on the River Alder."  # title dropped
        assert docs[-1][-1] == "Thousands of visitors come each year."


def test_bert_format_keeps_lines_verbatim_and_skips_extra_blank_lines(tmp_path: Path) -> None:
    p = tmp_path / "c.txt"
    p.write_text("\n\nA first line. Not split.\nSecond.\n\n\n\nOther doc.\n")
    assert list(read_documents([p], "bert")) == [
        ["A first line. Not split.", "Second."],
        ["Other doc."],
    ]


def test_paragraphs_join_wrapped_lines(tmp_path: Path) -> None:
    p = tmp_path / "c.txt"
    p.write_text("This sentence is\nwrapped over lines. And a\nsecond one.\n\nNew paragraph.")
    assert list(read_documents([p], "paragraphs")) == [
        ["This sentence is wrapped over lines.", "And a second one."],
        ["New paragraph."],
    ]


def test_jsonl_skips_blank_lines_and_empty_text(tmp_path: Path) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text('{"text": "Ab. Cd."}\n\n{"text": "  "}\n{"text": "Ef.\\nGh."}\n')
    assert list(read_documents([p], "jsonl")) == [["Ab.", "Cd."], ["Ef.", "Gh."]]


@pytest.mark.parametrize(
    ("content", "line", "needle"),
    [
        ('{"text": "ok"}\n{"text": "broken\n', 2, "invalid JSON"),
        ('{"text": "ok"}\n["a list"]\n', 2, "string field 'text'"),
        ('{"text": "ok"}\n\n{"body": "no text"}\n', 3, "string field 'text'"),
        ('{"text": 5}\n', 1, "string field 'text'"),
    ],
)
def test_malformed_jsonl_names_file_and_line(
    tmp_path: Path, content: str, line: int, needle: str
) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(InputError) as e:
        list(read_documents([p], "jsonl"))
    assert e.value.path == str(p) and e.value.line == line
    assert str(e.value).startswith(f"{p}:{line}: expected a JSON object")
    assert needle in str(e.value)


@pytest.mark.parametrize("fmt", ["auto", "bert", "paragraphs", "wikiextractor"])
def test_invalid_utf8_names_file_and_line(tmp_path: Path, fmt: str) -> None:
    p = tmp_path / "bad.txt"
    head = b'<doc id="1">\nTitle\n' if fmt in ("auto", "wikiextractor") else b"Title\n\n"
    p.write_bytes(head + b"Good line.\nBad \xff\xfe byte.\n</doc>\n")
    with pytest.raises(InputError) as e:
        list(read_documents([p], fmt))
    assert (e.value.path, e.value.line) == (str(p), 4)
    assert "UTF-8" in str(e.value)


def test_invalid_utf8_in_jsonl(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_bytes(b'{"text": "fine"}\n{"text": "bad \xff"}\n')
    with pytest.raises(InputError) as e:
        list(read_documents([p], "jsonl"))
    assert (e.value.path, e.value.line) == (str(p), 2)


def test_invalid_utf8_replace_mode(tmp_path: Path) -> None:
    p = tmp_path / "bad.txt"
    p.write_bytes(b"Bad \xff byte.\n")
    assert list(read_documents([p], "bert", encoding_errors="replace")) == [["Bad \ufffd byte."]]


@pytest.mark.parametrize(
    ("content", "line", "needle"),
    [
        ("stray text\n<doc id='1'>\nT\nA.\n</doc>\n", 1, "expected '<doc ...>'"),
        ("<doc id='1'>\nT\nA.\n<doc id='2'>\n", 4, "closing the <doc> of line 1"),
        ("<doc id='1'>\nT\nA.\n", 1, "before the end of the file"),
    ],
)
def test_malformed_wikiextractor(tmp_path: Path, content: str, line: int, needle: str) -> None:
    p = tmp_path / "w.txt"
    p.write_text(content)
    with pytest.raises(InputError) as e:
        list(read_documents([p], "wikiextractor"))
    assert e.value.line == line and needle in str(e.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        list(read_documents([tmp_path / "nope.txt"]))


def test_reading_streams_one_document_at_a_time(tmp_path: Path) -> None:
    # A generator: the second (malformed) document is not read before the first is consumed.
    p = tmp_path / "w.txt"
    p.write_text("<doc id='1'>\nT\nFirst doc.\n</doc>\ngarbage\n")
    it = read_documents([p], "wikiextractor")
    assert next(it) == ["First doc."]
    with pytest.raises(InputError):
        next(it)


@pytest.mark.parametrize(
    ("content", "fmt"),
    [
        ("\ufeff<doc id='1'>\nT\nFirst. Second.\n</doc>\n", "wikiextractor"),
        ('\ufeff{"text": "First. Second."}\n', "jsonl"),
        ("\ufeffFirst.\r\nSecond.\r\n", "bert"),
    ],
)
def test_byte_order_mark_and_crlf(tmp_path: Path, content: str, fmt: str) -> None:
    p = tmp_path / "c.txt"
    p.write_bytes(content.encode("utf-8"))
    assert detect_format(p) == fmt
    assert list(read_documents([p])) == [["First.", "Second."]]
