"""An explicit ``--format`` that disagrees with the file's own markers is refused, before any
shard is written; plain text under any plain-text format, and agreeing formats, still read."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.corpus import read_documents
from bertkit.data.corpus_format import marked_format
from bertkit.errors import InputError

FIX = Path(__file__).resolve().parents[1] / "fixtures"
JSONL = '\n\n{"text": "First one. Second one."}\n{"text": "Other doc."}\n'
WIKI = "<doc id='1' title='T'>\nT\nFirst one. Second one.\n</doc>\n"


@pytest.mark.parametrize(
    ("content", "marked", "line"), [(JSONL, "jsonl", 3), (WIKI, "wikiextractor", 1)]
)
@pytest.mark.parametrize("fmt", ["bert", "paragraphs", "wikitext", "wikiextractor", "jsonl"])
def test_explicit_format_against_the_files_markers(
    tmp_path: Path, content: str, marked: str, line: int, fmt: str
) -> None:
    path = tmp_path / "c.txt"
    path.write_text(content, encoding="utf-8")
    assert marked_format(path) == marked
    if fmt == marked:
        assert next(read_documents([path], fmt)) == ["First one.", "Second one."]
        return
    with pytest.raises(InputError) as e:
        next(read_documents([path], fmt))
    assert (e.value.path, e.value.line) == (str(path), line)
    assert f"read as --format {fmt}" in e.value.message
    assert f"pass --format {marked} or --format auto" in e.value.message


def test_parquet_named_as_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_bytes(b"PAR1" + bytes(range(40)))
    with pytest.raises(InputError, match=r"a Parquet file .* pass --format parquet"):
        next(read_documents([path], "bert"))


@pytest.mark.parametrize("fmt", ["bert", "paragraphs"])
def test_plain_text_has_no_marker(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "c.txt"
    path.write_text("{not json} at the start.\nSecond line.\n", encoding="utf-8")
    assert marked_format(path) is None
    assert len(list(read_documents([path], fmt))) == 1


@pytest.mark.parametrize("piece_mib", ["64", "0.0001"])
def test_prepare_refuses_before_writing(tmp_path: Path, capsys, piece_mib: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(JSONL * 20, encoding="utf-8")  # 20 x 2 documents; ~1 KiB: 10 pieces or one
    args = ["prepare-pretraining", "--input", str(path), "--vocab", str(FIX / "pt_vocab.txt")]
    args += ["--output", str(tmp_path / "out"), "--max-seq-length", "32", "--num-workers", "1"]
    assert main([*args, "--format", "bert", "--piece-mib", piece_mib]) == 1
    err = capsys.readouterr().err
    assert f"{path}:3: read as --format bert" in err and "pass --format jsonl" in err
    assert not (tmp_path / "out").exists()
    assert main([*args, "--format", "jsonl", "--piece-mib", piece_mib]) == 0
    assert "train: 40 docs" in capsys.readouterr().out
