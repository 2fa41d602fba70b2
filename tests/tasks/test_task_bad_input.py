"""Every task reader: a missing file and invalid UTF-8 give one-line InputErrors with file and line."""

from __future__ import annotations

from functools import partial

import pytest

from bertkit.data.tasks.conll import read_conll
from bertkit.data.tasks.custom import read_classification, read_tagging
from bertkit.data.tasks.glue import read_glue
from bertkit.data.tasks.squad import read_squad
from bertkit.data.tasks.swag import read_swag
from bertkit.errors import InputError

SWAG_HEAD = (
    b"video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
)

READERS = {
    "glue": (
        partial(read_glue, task="RTE"),
        "dev.tsv",
        b"index\tsentence1\tsentence2\tlabel\n0\tA.\tB\xc3(.\tentailment\n",
        2,
    ),
    "conll": (read_conll, "train.txt", b"EU B-ORG\n\nBonn\xff B-LOC\n", 3),
    "squad": (read_squad, "dev.json", b'{"data": [\n{"title": "\xe9t\xe9"}\n]}', 2),
    "swag": (read_swag, "val.csv", SWAG_HEAD + b"v,1,s,C\xfe.,He,g,a,b,c,d,0\n", 2),
    "csv": (
        partial(read_classification, text="t", label="y"),
        "a.csv",
        b"t,y\nok,1\nbad\x80,0\n",
        3,
    ),
    "jsonl": (read_tagging, "a.jsonl", b'{"tokens": ["\xff"], "tags": ["O"]}\n', 1),
}


@pytest.mark.parametrize("name", list(READERS))
def test_invalid_utf8(tmp_path, name):
    reader, filename, data, line = READERS[name]
    path = tmp_path / filename
    path.write_bytes(data)
    with pytest.raises(InputError) as info:
        reader(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:{line}: invalid UTF-8"), msg
    assert "\n" not in msg


@pytest.mark.parametrize("name", list(READERS))
def test_missing_file(tmp_path, name):
    reader, filename, _, _ = READERS[name]
    with pytest.raises(InputError, match=f"{filename}: file not found"):
        reader(tmp_path / filename)


@pytest.mark.parametrize("name", list(READERS))
def test_a_folder_is_not_a_file(tmp_path, name):
    """A folder where the file belongs: the same line from every reader (some said "cannot
    read (Is a directory)", the GLUE data-dir lookup "file not found")."""
    reader, filename, _, _ = READERS[name]
    (tmp_path / filename).mkdir()
    with pytest.raises(InputError) as info:
        reader(tmp_path / filename)
    assert str(info.value) == f"{tmp_path / filename}: is a folder, expected a file"


@pytest.mark.parametrize("suffix", [".gz", ".xz", ".bz2"])
@pytest.mark.parametrize("name", list(READERS))
def test_a_compressed_file_reads_like_the_plain_one(tmp_path, name, suffix):
    """``a.csv.gz`` was "cannot tell the format from the extension" (and a compressed SQuAD
    file invalid UTF-8), though the line reader decompresses it: the same error, same line."""
    import bz2
    import gzip
    import lzma

    reader, filename, data, line = READERS[name]
    compress = {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}[suffix]
    path = tmp_path / (filename + suffix)
    path.write_bytes(compress(data))
    with pytest.raises(InputError) as info:
        reader(path)
    assert str(info.value).startswith(f"{path}:{line}: invalid UTF-8"), str(info.value)


# ---- a byte-order mark (Windows editors write one) is not part of the first line --------------

BOM = b"\xef\xbb\xbf"


def test_bom_before_docstart_is_not_a_token(tmp_path):
    from bertkit.data.tasks.conll import count_sentences, is_token_only, read_tokens

    path = tmp_path / "train.txt"
    path.write_bytes(BOM + b"-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n")
    sentences = read_conll(path)
    assert [s.tokens for s in sentences] == [("EU", "rejects")]
    assert sentences[0].document == 1
    assert count_sentences(path) == 1
    tokens = tmp_path / "tokens.txt"
    tokens.write_bytes(BOM + b"-DOCSTART-\n\nEU\nrejects\n")
    assert is_token_only(tokens)
    assert [s.tokens for s in read_tokens(tokens)] == [("EU", "rejects")]


def test_bom_in_jsonl_and_squad(tmp_path):
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_bytes(BOM + b'{"t": "good", "y": "pos"}\n{"t": "bad", "y": "neg"}\n')
    assert [e.text_a for e in read_classification(jsonl, text="t", label="y").examples] == [
        "good",
        "bad",
    ]
    squad = tmp_path / "dev.json"
    squad.write_bytes(
        BOM + b'{"data": [{"title": "t", "paragraphs": [{"context": "Paris is in France.", "qas": '
        b'[{"id": "q", "question": "Where?", "answers": [{"text": "France", "answer_start": 12}]}]}]}]}'
    )
    assert [e.answers[0].text for e in read_squad(squad)] == ["France"]


@pytest.mark.parametrize("value", ["nan", "inf", "-Infinity"])
def test_regression_score_not_finite(tmp_path, value):
    path = tmp_path / "a.csv"
    path.write_text(f"t,y\nok,1.5\nx,{value}\n")
    with pytest.raises(InputError, match=rf"a\.csv:3: expected a numeric 'y' value, got '{value}'"):
        read_classification(path, text="t", label="y", regression=True)
    sts = tmp_path / "dev.tsv"
    header = "index genre filename year old_index source1 source2 sentence1 sentence2 score"
    sts.write_text(
        "\t".join(header.split()) + "\n" + "\t".join(["0"] * 7 + ["a", "b", value]) + "\n"
    )
    with pytest.raises(InputError, match=r"dev\.tsv:2: expected a numeric 'score' score"):
        read_glue(sts, "STS-B")


# ---- the invalid-UTF-8 hint --------------------------------------------------------------


def test_invalid_utf8_hint_names_no_flag_the_command_lacks(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(b"t,y\nok,1\nbad\x80,0\n")
    with pytest.raises(InputError) as info:
        read_classification(path, text="t", label="y")
    assert "--encoding-errors" not in str(
        info.value
    )  # finetune, evaluate, predict have no such flag
