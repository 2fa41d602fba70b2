"""`bertkit train-vocab` and `bertkit tokenize`, including invalid UTF-8 input."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from bertkit.cli.main import main

VOCAB = Path(__file__).parents[1] / "fixtures" / "tok_vocab.txt"


def run_stdin(monkeypatch, capsys, data: bytes, argv: list[str]) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_tokenize_stdin(monkeypatch, capsys) -> None:
    data = "UNwant\u00e9d,running\nhi [MASK]\n".encode()
    code, out, _ = run_stdin(monkeypatch, capsys, data, ["tokenize", "--vocab", str(VOCAB)])
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[0]["tokens"] == ["[CLS]", "un", "##want", "##ed", ",", "runn", "##ing", "[SEP]"]
    assert rows[0]["offsets"][1:4] == [[0, 2], [2, 6], [6, 8]]
    assert rows[1]["input_ids"] == [2, 29, 4, 3]
    assert rows[1]["token_type_ids"] == [0, 0, 0, 0]


def test_tokenize_pairs_and_max_length(monkeypatch, capsys) -> None:
    data = b"Hello World\tone two three four\n"
    argv = ["tokenize", "--vocab", str(VOCAB), "--pair", "--max-length", "7", "--cased"]
    code, out, _ = run_stdin(monkeypatch, capsys, data, argv)
    row = json.loads(out)
    assert code == 0
    assert row["tokens"] == ["[CLS]", "Hello", "World", "[SEP]", "one", "two", "[SEP]"]
    assert row["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1]
    code, _, err = run_stdin(monkeypatch, capsys, b"no tab here\n", argv)
    assert code == 1 and "<stdin>:1: expected 2 tab-separated texts, got 1" in err


def test_tokenize_file_with_workers(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("".join(f"line {i} unwanted running, hello world\n" for i in range(1500)))
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert main(["tokenize", "--vocab", str(VOCAB), "--input", str(src), "--output", str(one)]) == 0
    argv = ["tokenize", "--vocab", str(VOCAB), "--input", str(src), "--output", str(two)]
    assert main([*argv, "--workers", "2"]) == 0
    assert one.read_bytes() == two.read_bytes()
    assert len(one.read_text().splitlines()) == 1500


def test_tokenize_shows_progress_and_ends_with_a_summary(tmp_path: Path, capsys, monkeypatch):
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("hello world\nunwanted running\n")
    monkeypatch.setenv("BERTKIT_PROGRESS", "1")  # the bar, off when stderr is not a terminal
    assert main(["tokenize", "--vocab", str(VOCAB), "--input", str(src), "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "tokenizing: 100%" in err and "2/2" in err and "lines/s" in err  # a total: an ETA
    summary = err.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"tokenized 2 lines \(11 tokens\) -> {re.escape(str(out))} in \d+\.\ds "
        r"\(\d+\.\d lines/s\)",
        summary,
    ), summary
    monkeypatch.setenv("BERTKIT_PROGRESS", "0")
    code, rows, err = run_stdin(monkeypatch, capsys, b"hi\n", ["tokenize", "--vocab", str(VOCAB)])
    assert code == 0 and len(rows.splitlines()) == 1  # the summary is not in the output
    assert err.startswith("tokenized 1 line (3 tokens) -> stdout in ")  # not "1 lines"


def test_invalid_utf8_names_file_and_line(tmp_path: Path, capsys) -> None:
    src = tmp_path / "bad.txt"
    src.write_bytes(b"fine line\nstill fine\nbad \xff\xfe byte\nafter\n")
    out = tmp_path / "out.jsonl"
    argv = ["tokenize", "--vocab", str(VOCAB), "--input", str(src), "--output", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"{src}:3: invalid UTF-8" in err
    assert not out.exists()  # nothing half-written
    assert main([*argv, "--encoding-errors", "replace"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and rows[2]["offsets"][-2] == [7, 11]  # 2 x U+FFFD dropped, "byte" kept


def test_invalid_utf8_on_stdin(monkeypatch, capsys) -> None:
    code, _out, err = run_stdin(
        monkeypatch, capsys, b"ok\n\xc3\x28\n", ["tokenize", "--vocab", str(VOCAB)]
    )
    assert code == 1 and "<stdin>:2: invalid UTF-8" in err


def test_train_vocab(tmp_path: Path, capsys) -> None:
    src = tmp_path / "corpus.txt"
    lines = [
        '<doc id="1">',
        *(f"the cat number {i % 7} sat on the mat." for i in range(300)),
        "</doc>",
    ]
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "vocab.txt"
    argv = ["train-vocab", "--input", str(src), "--vocab-size", "80", "--output", str(out)]
    assert main(argv) == 0
    assert "peak RSS" in capsys.readouterr().err
    tokens = out.read_text().splitlines()
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(tokens) <= 80
    assert "the" in tokens and "<" not in tokens  # <doc> lines are skipped
    assert main([*argv[:-2], "--output", str(tmp_path / "cased.txt"), "--cased"]) == 0


def test_train_vocab_bad_input(tmp_path: Path, capsys) -> None:
    src = tmp_path / "bad.txt"
    src.write_bytes(b"good\n\x80bad\n")
    out = tmp_path / "vocab.txt"
    assert main(["train-vocab", "--input", str(src), "--output", str(out)]) == 1
    assert f"{src}:2: invalid UTF-8" in capsys.readouterr().err
    assert not out.exists()
    missing = tmp_path / "missing.txt"
    assert main(["train-vocab", "--input", str(missing), "--output", str(out)]) == 1
    assert "file not found" in capsys.readouterr().err


def test_train_vocab_size_below_the_alphabet_is_one_line(tmp_path: Path, capsys) -> None:
    """A --vocab-size too small for the specials and the corpus's alphabet is a usage mistake:
    one error line naming the flag to change, no traceback, no vocab.txt."""
    src = tmp_path / "corpus.txt"
    src.write_text("abcdefghij klmnop\n" * 3)
    out = tmp_path / "vocab.txt"
    argv = ["train-vocab", "--input", str(src), "--vocab-size", "6", "--output", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "bertkit train-vocab: error: vocab_size=6 is smaller" in err and "Traceback" not in err
    assert not out.exists()


def test_tokenize_with_a_file_that_is_no_vocab_names_it(tmp_path: Path, monkeypatch, capsys):
    """A data file passed as --vocab (every line a "token", none of them [UNK]): the error names
    that file and what was expected, not just "the vocabulary"."""
    tsv = tmp_path / "dev.tsv"
    tsv.write_text("sentence\tlabel\nit is good\t1\n")
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
    assert main(["tokenize", "--vocab", str(tsv)]) == 1
    err = capsys.readouterr().err
    assert f"{tsv}: no [UNK] token (expected a WordPiece vocab.txt)" in err


@pytest.mark.parametrize("flag", ["--help"])
def test_help_lists_commands(flag: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main([flag])
    out = capsys.readouterr().out
    assert "train-vocab" in out and "tokenize" in out


def test_tokenize_and_train_vocab_stream_a_fifo_like_a_file(tmp_path: Path, capsys) -> None:
    """They read their input once, line by line, as they read stdin: a named pipe is an input
    (it was "file not found"). Neither checks nor counts it first (that would consume it)."""
    from support.fifo import fed_fifo

    data = "".join(f"the cat number {i % 7} sat on the mat.\n" for i in range(300)).encode()
    src = tmp_path / "in.txt"
    src.write_bytes(data)
    for command, out, extra in (
        ("tokenize", "tok", ["--vocab", str(VOCAB)]),
        ("train-vocab", "vocab", ["--vocab-size", "80"]),
    ):
        argv = [command, *extra, "--input"]
        assert main([*argv, str(src), "--output", str(tmp_path / f"{out}-file.txt")]) == 0
        with fed_fifo(tmp_path / f"{out}.fifo", data) as fifo:
            assert main([*argv, str(fifo), "--output", str(tmp_path / f"{out}-fifo.txt")]) == 0
        want = (tmp_path / f"{out}-file.txt").read_bytes()
        assert (tmp_path / f"{out}-fifo.txt").read_bytes() == want and want


@pytest.mark.parametrize(
    ("data", "flags", "error"),
    [
        (
            b"hello world\n",
            ["--max-length", "3", "--truncation", "only_second"],
            "bertkit tokenize: error: --truncation only_second cuts each line's second text: "
            "it needs --pair",
        ),
        (
            b"hello world\n",
            ["--max-length", "1"],
            "bertkit tokenize: error: --max-length 1 is less than the 2 special tokens "
            "([CLS]/[SEP]) of each line; pass a larger one (or --no-special-tokens)",
        ),
        (
            b"hello world\tone\nhi\tone two three four\n",
            ["--pair", "--max-length", "6", "--truncation", "only_first"],
            "bertkit tokenize: error: <stdin>:2: the first sequence has 1 tokens, too few to "
            "remove the 2 needed to respect max_length (--truncation only_first)",
        ),
    ],
)
def test_truncation_that_cannot_be_done_is_one_line(monkeypatch, capsys, data, flags, error):
    """These raised the tokenizer's ValueError as a traceback; the flags are checked before any
    line is read, a line too short to cut is named."""
    code, out, err = run_stdin(
        monkeypatch, capsys, data, ["tokenize", "--vocab", str(VOCAB), *flags]
    )
    assert code == 1 and out == ""
    assert err.strip() == error


def test_a_model_folder_as_vocab_names_the_vocab_txt_inside(tmp_path: Path, capsys) -> None:
    """`tokenize --vocab MODEL_DIR` said only 'is a folder, expected a file'."""
    (tmp_path / "vocab.txt").write_bytes(VOCAB.read_bytes())
    assert main(["tokenize", "--vocab", str(tmp_path), "--input", str(VOCAB)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"bertkit tokenize: error: {tmp_path}: is a folder, expected a file "
        f"(its vocabulary is {tmp_path / 'vocab.txt'})"
    )
