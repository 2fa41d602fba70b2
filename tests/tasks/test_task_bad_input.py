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
