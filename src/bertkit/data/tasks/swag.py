"""SWAG multiple-choice CSV reading.

The SWAG files (``train.csv``, ``val.csv``, ``test.csv``) are comma-separated with a header::

    ,video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label

(the leading unnamed index column is optional; ``test.csv`` has no ``label``). Each example has a
context (``sent1``), the start of the candidate sentence (``sent2``) and four endings; the model
scores ``[CLS] sent1 [SEP] sent2 + " " + ending_i [SEP]`` for each i, giving (B, 4, T) inputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bertkit.data.tasks._rows import csv_rows
from bertkit.errors import InputError

NUM_ENDINGS = 4
REQUIRED_COLUMNS = ("sent1", "sent2", *(f"ending{i}" for i in range(NUM_ENDINGS)))


@dataclass(frozen=True)
class MultipleChoiceExample:
    """A context, the shared start of every choice, and the candidate endings.

    ``label`` is the index of the correct ending (None for unlabelled rows); ``line`` is the
    1-based line where the row starts.
    """

    guid: str
    context: str
    start: str
    endings: tuple[str, ...]
    label: int | None
    line: int = 0

    def choices(self) -> list[tuple[str, str]]:
        """The (first, second) text pair fed to the encoder for each ending."""
        return [(self.context, f"{self.start} {e}".strip()) for e in self.endings]


def read_swag(path: str | Path) -> list[MultipleChoiceExample]:
    """Read a SWAG-format CSV file: :func:`iter_swag`, whole."""
    return list(iter_swag(path))


def iter_swag(path: str | Path) -> Iterator[MultipleChoiceExample]:
    """The examples of a SWAG-format CSV file, each row parsed as it is pulled (the file is read
    line by line, so a corpus-scale run holds one window of examples, never the file).

    Raises InputError(path, line, ...) for a header without the required columns, a row with a
    different number of fields than the header, an empty context/ending, or a label that is
    not an integer in [0, 4), each when its line is reached.
    """
    rows = csv_rows(path)
    first = next(rows, None)
    if first is None:
        raise InputError(path, 1, "empty file (expected a SWAG CSV with a header)")
    lineno, header = first
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(
            path,
            lineno,
            f"expected a SWAG header with columns {', '.join(REQUIRED_COLUMNS)}[, label]; "
            f"missing {', '.join(missing)}",
        )
    idx = {c: header.index(c) for c in header if c}
    label_idx = idx.get("label")
    for lineno, row in rows:
        if len(row) != len(header):
            raise InputError(
                path, lineno, f"expected {len(header)} comma-separated fields, got {len(row)}"
            )
        if not row[idx["sent1"]].strip():
            raise InputError(path, lineno, "expected a non-empty 'sent1' context")
        endings = tuple(row[idx[f"ending{i}"]] for i in range(NUM_ENDINGS))
        if any(not e.strip() for e in endings):
            raise InputError(path, lineno, "expected four non-empty endings ending0..ending3")
        label = None
        if label_idx is not None:
            raw = row[label_idx]
            if raw not in {str(i) for i in range(NUM_ENDINGS)}:
                raise InputError(path, lineno, f"expected a label in {{0, 1, 2, 3}}, got {raw!r}")
            label = int(raw)
        guid = row[idx["fold-ind"]] if "fold-ind" in idx else str(lineno)
        yield MultipleChoiceExample(
            guid, row[idx["sent1"]], row[idx["sent2"]], endings, label, lineno
        )
