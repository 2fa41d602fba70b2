"""The streaming readers (``iter_conll``, ``iter_tokens``, ``iter_tagging``, ``iter_swag``) give
exactly the whole-file readers' examples, one at a time, on hand-made files with the layout's
edge cases, and stop at a bad line with an error naming file and line only when it is reached."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.data.tasks.conll import (
    TaggedSentence,
    is_token_only,
    iter_conll,
    iter_tokens,
    read_conll,
    read_tokens,
)
from bertkit.data.tasks.custom import iter_tagging, read_tagging
from bertkit.data.tasks.swag import MultipleChoiceExample, iter_swag, read_swag
from bertkit.errors import InputError

# -DOCSTART- first and twice in a row, two blank lines between sentences, a sentence right after
# a -DOCSTART- line with no blank line, CRLF line ends, no newline after the last line
CONLL = (
    b"-DOCSTART- -X- -X- O\r\n"  # 1
    b"\r\n"
    b"Anna NNP B-NP B-PER\r\n"  # 3
    b"Berg NNP I-NP I-PER\r\n"
    b"\r\n"
    b"\r\n"
    b"visited VBD B-VP O\r\n"  # 7
    b"-DOCSTART- -X- -X- O\r\n"  # 8: ends the sentence, document 2
    b"-DOCSTART- -X- -X- O\r\n"  # 9: document 3, no sentence in 2
    b"Acme NNP B-NP I-ORG\r\n"  # 10: IOB1 start, read as B-ORG
    b"Corp NNP I-NP I-ORG\r\n"
    b"\r\n"
    b"   \t \r\n"  # 13: whitespace only is blank
    b"Paris NNP B-NP B-LOC"  # 14, no line end
)
CONLL_SENTENCES = [
    TaggedSentence(("Anna", "Berg"), ("B-PER", "I-PER"), 3, 1),
    TaggedSentence(("visited",), ("O",), 7, 1),
    TaggedSentence(("Acme", "Corp"), ("B-ORG", "I-ORG"), 10, 3),
    TaggedSentence(("Paris",), ("B-LOC",), 14, 3),
]


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_conll_stream_equals_the_whole_file(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.conll", CONLL)
    it = iter_conll(p)
    assert next(it) == CONLL_SENTENCES[0]  # one at a time
    assert [CONLL_SENTENCES[0], *it] == CONLL_SENTENCES == read_conll(p)
    raw = [s.tags for s in iter_conll(p, convert_to_iob2=False, tag_column=2)]
    assert raw == [("B-NP", "I-NP"), ("B-VP",), ("B-NP", "I-NP"), ("B-NP",)]
    assert raw == [s.tags for s in read_conll(p, convert_to_iob2=False, tag_column=2)]
    assert read_conll(_write(tmp_path, "empty.conll", b"-DOCSTART- O\n\n\n")) == []
    assert list(iter_conll(tmp_path / "empty.conll")) == []


def test_token_file_stream_equals_the_whole_file(tmp_path: Path) -> None:
    one_column = b"\r\n".join(
        line.split(b" ")[0] if line.strip() and not line.startswith(b"-DOC") else line
        for line in CONLL.split(b"\r\n")
    )
    assert one_column.count(b"\r\n") == CONLL.count(b"\r\n") and one_column.endswith(b"Paris")
    p = _write(tmp_path, "tokens.txt", one_column)
    assert is_token_only(p) and not is_token_only(_write(tmp_path, "a.conll", CONLL))
    want = [TaggedSentence(s.tokens, (), s.line, s.document) for s in CONLL_SENTENCES]
    assert list(iter_tokens(p)) == want == read_tokens(p)


@pytest.mark.parametrize(
    ("body", "line", "expected"),
    [
        (
            b"a O\n\nb X\n",
            3,
            "expected a tag O, B-TYPE or I-TYPE in column 2 of 2, got 'X'"
            " (CoNLL columns: one token per line)",
        ),
        (b"a NN O\n\nb O\n", 3, "expected 3 whitespace-separated columns, got 2"),
    ],
)
def test_a_bad_conll_line_stops_the_stream_when_reached(tmp_path, body, line, expected) -> None:
    p = _write(tmp_path, "bad.conll", body)
    it = iter_conll(p)
    assert next(it).tokens == ("a",)  # the lines before the bad one are read
    with pytest.raises(InputError) as info:
        next(it)
    assert str(info.value) == f"{p}:{line}: {expected}"
    with pytest.raises(InputError) as whole:
        read_conll(p)
    assert str(whole.value) == str(info.value)


def test_a_bad_token_line_and_an_unknown_scheme(tmp_path: Path) -> None:
    p = _write(tmp_path, "tokens.txt", b"a\r\nb\r\n\r\nc d\r\n")
    it = iter_tokens(p)
    assert next(it) == TaggedSentence(("a", "b"), (), 1, 0)
    with pytest.raises(InputError) as info:
        next(it)
    assert str(info.value) == (
        f"{p}:4: expected one token per line (like the file's first), got 2 columns"
    )
    with pytest.raises(InputError, match="unknown tag scheme 'BILOU'"):  # at once, not when pulled
        iter_conll(p, scheme="BILOU")


def test_an_iob2_file_with_an_iob1_start_names_its_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.conll", CONLL)
    it = iter_conll(p, scheme="IOB2")
    assert [next(it), next(it)] == CONLL_SENTENCES[:2]
    with pytest.raises(InputError) as info:
        next(it)
    assert str(info.value).startswith(f"{p}:10: expected B-ORG to start an entity")


def test_tagging_records_stream_equals_the_whole_file(tmp_path: Path) -> None:
    tsv = _write(
        tmp_path,
        "t.tsv",
        b"id\twords\tlabels\r\n1\tAnna Berg\tI-PER I-PER\r\n\r\n2\tin Paris\tO B-LOC",
    )
    want = [
        TaggedSentence(("Anna", "Berg"), ("B-PER", "I-PER"), 2),
        TaggedSentence(("in", "Paris"), ("O", "B-LOC"), 4),
    ]
    assert list(iter_tagging(tsv, tokens="words", tags="labels")) == want
    assert read_tagging(tsv, tokens="words", tags="labels") == want
    jsonl = _write(
        tmp_path,
        "t.jsonl",
        b'{"tokens": ["a"], "tags": ["O"]}\n{"tokens": ["b", "c"], "tags": ["O"]}\n',
    )
    it = iter_tagging(jsonl)
    assert next(it) == TaggedSentence(("a",), ("O",), 1)
    with pytest.raises(InputError) as info:
        next(it)
    assert str(info.value) == f"{jsonl}:2: expected 'tags' to list one tag per token (2), got 1"
    with pytest.raises(InputError, match="cannot tell the format"):  # at once
        iter_tagging(tmp_path / "t.txt")


# no index column, CRLF, a quoted field over two lines, no label column, no final line end
SWAG = (
    b"video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3\r\n"
    b"v1,101,x,The chef cooks.,She,gold,eats.,sleeps.,runs.,sings.\r\n"
    b'v2,102,x,"A man,\r\nsmiling.",He,gen,a,b,"c, ""d""",e\r\n'
    b"\r\n"
    b"v3,103,x,It rains.,,gold,w,x,y,z"
)
SWAG_EXAMPLES = [
    MultipleChoiceExample(
        "101", "The chef cooks.", "She", ("eats.", "sleeps.", "runs.", "sings."), None, 2
    ),
    MultipleChoiceExample("102", "A man,\nsmiling.", "He", ("a", "b", 'c, "d"', "e"), None, 3),
    MultipleChoiceExample("103", "It rains.", "", ("w", "x", "y", "z"), None, 6),
]


def test_swag_stream_equals_the_whole_file(tmp_path: Path) -> None:
    p = _write(tmp_path, "val.csv", SWAG)
    it = iter_swag(p)
    assert next(it) == SWAG_EXAMPLES[0]
    assert [SWAG_EXAMPLES[0], *it] == SWAG_EXAMPLES == read_swag(p)


def test_a_bad_swag_row_stops_the_stream_when_reached(tmp_path: Path) -> None:
    header = SWAG.split(b"\r\n")[0].replace(b"ending3", b"ending3,label")
    p = _write(
        tmp_path, "bad.csv", header + b"\nv,1,x,Ctx.,He,g,a,b,c,d,0\nv,2,x,Ctx.,He,g,a,b,c,d,4\n"
    )
    it = iter_swag(p)
    assert next(it).label == 0
    with pytest.raises(InputError) as info:
        next(it)
    assert str(info.value) == f"{p}:3: expected a label in {{0, 1, 2, 3}}, got '4'"
    with pytest.raises(InputError) as whole:
        read_swag(p)
    assert str(whole.value) == str(info.value)
