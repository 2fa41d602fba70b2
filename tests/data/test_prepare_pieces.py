"""Large files prepared in pieces: the cut points of each format, every document read exactly
once whatever the piece count, and a folder that does not depend on the number of workers."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from bertkit.data.corpus import CorpusOptions, read_file_documents
from bertkit.data.corpus_spans import document_start
from bertkit.data.prepare import PrepareSettings, prepare_pretraining
from bertkit.data.prepare_files import count_pieces, nominal_bounds, piece_span
from bertkit.data.pretraining import InstanceConfig
from bertkit.errors import InputError
from support.corpus_fixtures import FORMAT_FIXTURES

FIX = Path(__file__).resolve().parents[1] / "fixtures"
VOCAB = FIX / "pt_vocab.txt"

WIKITEXT = (
    " \n = River Alder = \n \n The River Alder is a short river . It rises on open moorland .\n"
    " \n = = Course = = \n \n It flows west for 12 @.@ 5 miles .\n"
    " \n = Kelby Bridge = \n \n The bridge was built in 1851 . It has three arches .\n"
    "   = Not a title = \n The line above is text , not a title .\n"
)
# Extra blank lines, a line of spaces, CRLF endings, a no-break space line (blank to the
# reader), and no newline at the end.
BERT = (
    "\ufeffFirst doc, line one.\r\nFirst doc, line two.\r\n\r\n\r\n"
    "Second doc.\n   \nThird doc, one.\nThird doc, two.\n\u00a0\nFourth doc.\n\nFifth doc."
)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


def _docs(path: Path, fmt: str, pieces: int) -> list[list[str]]:
    """Every piece's documents, in piece order."""
    out: list[list[str]] = []
    for k in range(pieces):
        span = piece_span(path, fmt, k, pieces)
        if span is not None:
            out.extend(read_file_documents(path, CorpusOptions(fmt, "body"), span))
    return out


def test_document_starts_follow_each_format_rule(tmp_path: Path) -> None:
    bert = _write(tmp_path, "b.txt", "A b.\nC d.\n\n\nE f.\n  \nG h.\n")
    #                                  0     5     10 11 12    17  20
    assert [document_start(bert, "bert", lo) for lo in (0, 1, 5, 10, 12, 13, 21)] == [
        0, 12, 12, 12, 12, 20, None,
    ]  # fmt: skip
    assert document_start(bert, "bert", 1, 12) is None  # nothing starts before 12
    assert document_start(bert, "paragraphs", 13) == 20  # blank: spaces only
    wiki = _write(tmp_path, "w.txt", '<doc id="1">\nT\n\nx\n</doc>\n  <doc id="2">\nU\n</doc>\n')
    assert document_start(wiki, "wikiextractor", 1) == 25  # after leading spaces, as the reader
    assert document_start(wiki, "wikiextractor", 26) is None
    text = _write(tmp_path, "t.txt", WIKITEXT)
    starts = [document_start(text, "wikitext", lo) for lo in (1, 60)]
    assert [WIKITEXT[s:].split("\n")[0] for s in starts] == [
        " = River Alder = ",
        " = Kelby Bridge = ",
    ]
    assert document_start(text, "wikitext", WIKITEXT.index("Kelby") + 1) is None  # not the last
    jsonl = _write(tmp_path, "j.jsonl", '{"text": "a"}\n{"text": "b"}\n')
    assert [document_start(jsonl, "jsonl", lo) for lo in (1, 14, 15)] == [14, 14, None]
    with pytest.raises(ValueError, match="parquet"):
        document_start(jsonl, "parquet", 1)


@pytest.mark.parametrize(("name", "fmt"), FORMAT_FIXTURES)
def test_every_piece_count_reads_each_document_once(name: str, fmt: str) -> None:
    path = FIX / name
    whole = list(read_file_documents(path, CorpusOptions(fmt, "body")))
    assert len(whole) >= 4
    for pieces in (2, 3, 5, 8, 13, 40, path.stat().st_size):
        assert _docs(path, fmt, pieces) == whole, pieces


@pytest.mark.parametrize(("text", "fmt"), [(WIKITEXT, "wikitext"), (BERT, "bert")])
def test_edge_cases_read_each_document_once(tmp_path: Path, text: str, fmt: str) -> None:
    path = _write(tmp_path, f"x.{fmt}", text)
    whole = list(read_file_documents(path, CorpusOptions(fmt)))
    assert len(whole) == (2 if fmt == "wikitext" else 5)
    assert whole[0][0] in ("First doc, line one.", "The River Alder is a short river .")  # no BOM
    for pieces in range(2, path.stat().st_size + 1):
        assert _docs(path, fmt, pieces) == whole, pieces


def test_a_document_longer_than_a_share_leaves_the_shares_after_it_empty(tmp_path: Path) -> None:
    text = "Short one.\n\n" + "".join(f"Long sentence {i}.\n" for i in range(200)) + "\nEnd.\n"
    path = _write(tmp_path, "long.txt", text)
    spans = [piece_span(path, "bert", k, 10) for k in range(10)]
    assert spans[0] == (0, text.index("End."))  # the long document starts in its share
    assert spans[1:9] == [None] * 8
    assert spans[9] == (text.index("End."), len(text))
    assert _docs(path, "bert", 10) == list(read_file_documents(path, CorpusOptions("bert")))


def test_compressed_and_small_files_are_one_piece(tmp_path: Path) -> None:
    plain = _write(tmp_path, "a.txt", "x" * 3000)
    packed = tmp_path / "a.txt.gz"
    packed.write_bytes(gzip.compress(b"x" * 3000))
    one_kib = 1 / 1024
    assert count_pieces(plain, one_kib) == 3
    assert count_pieces(plain, 1.0) == 1
    assert count_pieces(packed, one_kib) == 1
    assert count_pieces(plain, one_kib, "parquet") == 1  # read as Parquet: whole
    assert nominal_bounds(3000, 2, 3) == (2000, 3000)


SETTINGS = dict(
    instance=InstanceConfig(max_seq_length=32, dupe_factor=2),
    corpus=CorpusOptions(text_field="body"),
    seed=7,
    shard_size=20,
    holdout_fraction=0.2,
)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_pieces_make_one_folder_whatever_the_workers(tmp_path: Path) -> None:
    inputs = [FIX / "pt_bert.txt", FIX / "pt_docs.jsonl"]
    cut = PrepareSettings(**SETTINGS, piece_mib=400 / (1 << 20))  # 5 pieces each
    folders = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        prepare_pretraining(inputs, VOCAB, out, cut, num_workers=workers, show_progress=False)
        folders[workers] = _files(out)
    assert folders[1] == folders[2]
    manifest = json.loads(folders[1]["manifest.json"])
    assert [i["pieces"] for i in manifest["inputs"]] == [5, 5]
    assert manifest["settings"]["piece_mib"] == cut.piece_mib
    names = [s["file"] for split in manifest["splits"].values() for s in split["shards"]]
    # The first piece is named as a whole file was: train-00001-0000.npz, train-00001-p0003-...
    found = [re.fullmatch(r"(train|eval)-(\d{5})(?:-p(\d{4}))?-\d{4}\.npz", n) for n in names]
    assert all(found), names
    pieces = {(int(m[2]), int(m[3] or 0)) for m in found}
    assert pieces == {
        (i, k)
        for i, (path, fmt) in enumerate(zip(inputs, ("bert", "jsonl")))
        for k in range(5)
        if piece_span(path, fmt, k, 5) is not None
    }
    assert len(pieces) >= 8

    whole = tmp_path / "whole"
    prepare_pretraining(inputs, VOCAB, whole, PrepareSettings(**SETTINGS), show_progress=False)
    uncut = json.loads((whole / "manifest.json").read_text())
    assert "pieces" not in uncut["inputs"][0]
    for count in ("documents", "sentences", "tokens"):  # the same text, other RNG streams
        assert _total(manifest, count) == _total(uncut, count) > 0


def _total(manifest: dict, count: str) -> int:
    return sum(split[count] for split in manifest["splits"].values())


def test_an_error_in_a_later_piece_names_the_files_line(tmp_path: Path) -> None:
    lines = [json.dumps({"text": f"Document number {i} is here."}) for i in range(40)]
    lines[33] = '{"text": 5}'
    path = _write(tmp_path, "bad.jsonl", "\n".join(lines) + "\n")
    cut = PrepareSettings(**{**SETTINGS, "corpus": CorpusOptions()}, piece_mib=200 / (1 << 20))
    assert count_pieces(path, cut.piece_mib) > 5
    with pytest.raises(InputError) as e:
        prepare_pretraining([path], VOCAB, tmp_path / "out", cut, show_progress=False)
    assert (e.value.path, e.value.line) == (str(path), 34)
    assert not (tmp_path / "out").exists()
