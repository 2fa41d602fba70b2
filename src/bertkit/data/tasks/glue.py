"""GLUE readers for all nine tasks, in the files' original TSV formats, plus a task registry.

Quoting follows the GLUE reference code (``csv.reader(delimiter="\\t", quotechar=None)``): a
double quote is an ordinary character and every physical line is one row, so a sentence such as
``"The pie business`` (unbalanced quote, real MRPC row) stays as it is.

Files are located by the layout of the official download, so ``--data-dir DIR`` needs no
other flag::

    DIR/CoLA/{train,dev,test}.tsv            no header in train/dev: source, label, original-label, sentence
    DIR/SST-2/{train,dev,test}.tsv           sentence, label
    DIR/MRPC/{train,dev,test}.tsv            Quality, #1 ID, #2 ID, #1 String, #2 String
    DIR/STS-B/{train,dev,test}.tsv           ..., sentence1, sentence2, score (regression)
    DIR/QQP/{train,dev,test}.tsv             id, qid1, qid2, question1, question2, is_duplicate
    DIR/MNLI/train.tsv, dev_matched.tsv, dev_mismatched.tsv, test_matched.tsv, test_mismatched.tsv
    DIR/QNLI, DIR/RTE, DIR/WNLI/{train,dev,test}.tsv

``DIR`` may also be the task folder itself. Test files (no label column) are read with
``label=None``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.errors import InputError, MissingFileError
from bertkit.input_files import require_file
from bertkit.io import read_text_lines


@dataclass(frozen=True)
class ClassificationExample:
    """One single-text or text-pair example.

    ``label`` is the class index into the task's label list, a float for regression, or None
    for unlabelled (test) rows. ``line`` is the 1-based line of the row in its file.
    """

    guid: str
    text_a: str
    text_b: str | None
    label: int | float | None
    line: int = 0


@dataclass(frozen=True)
class GlueTask:
    """How one GLUE task's files look and how it is scored.

    ``header`` is the train/dev header (None for CoLA, which has none), ``text_columns`` the
    column names holding text_a (and text_b), ``label_column`` the label's column name.
    ``labels`` is the ordered label list (None: regression). ``metric`` names the official
    metric(s): "mcc", "accuracy", "accuracy_f1" or "pearson_spearman". ``files`` maps split
    names to file names in the official download.
    """

    name: str
    header: tuple[str, ...] | None
    text_columns: tuple[str, ...]
    label_column: str
    labels: tuple[str, ...] | None
    metric: str
    files: dict[str, str] = field(
        default_factory=lambda: {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
    )

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    @property
    def main_metric(self) -> str:
        """The key of the score the paper reports and model selection uses."""
        return {"mcc": "mcc", "accuracy": "accuracy", "accuracy_f1": "f1"}.get(
            self.metric, "spearman"
        )

    @property
    def dev_splits(self) -> tuple[str, ...]:
        """The dev split names (MNLI has two)."""
        return tuple(s for s in self.files if s.startswith("dev"))


def _columns(names: str) -> tuple[str, ...]:
    """Column names from a space-separated string (none of these names holds a space)."""
    return tuple(names.split())


_COLA_COLUMNS = ("source", "label", "original_label", "sentence")
_NLI = ("entailment", "not_entailment")

GLUE_TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        GlueTask("CoLA", None, ("sentence",), "label", ("0", "1"), "mcc"),
        GlueTask("SST-2", ("sentence", "label"), ("sentence",), "label", ("0", "1"), "accuracy"),
        GlueTask(
            "MRPC",
            ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
            ("#1 String", "#2 String"),
            "Quality",
            ("0", "1"),
            "accuracy_f1",
        ),
        GlueTask(
            "STS-B",
            _columns(
                "index genre filename year old_index source1 source2 sentence1 sentence2 score"
            ),
            ("sentence1", "sentence2"),
            "score",
            None,
            "pearson_spearman",
        ),
        GlueTask(
            "QQP",
            ("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
            ("question1", "question2"),
            "is_duplicate",
            ("0", "1"),
            "accuracy_f1",
        ),
        GlueTask(
            "MNLI",
            # then label1 [.. label5], gold_label: the label is the last column
            _columns(
                "index promptID pairID genre sentence1_binary_parse sentence2_binary_parse "
                "sentence1_parse sentence2_parse sentence1 sentence2"
            ),
            ("sentence1", "sentence2"),
            "gold_label",
            ("contradiction", "entailment", "neutral"),
            "accuracy",
            {
                "train": "train.tsv",
                "dev_matched": "dev_matched.tsv",
                "dev_mismatched": "dev_mismatched.tsv",
                "test_matched": "test_matched.tsv",
                "test_mismatched": "test_mismatched.tsv",
            },
        ),
        GlueTask(
            "QNLI",
            ("index", "question", "sentence", "label"),
            ("question", "sentence"),
            "label",
            _NLI,
            "accuracy",
        ),
        GlueTask(
            "RTE",
            ("index", "sentence1", "sentence2", "label"),
            ("sentence1", "sentence2"),
            "label",
            _NLI,
            "accuracy",
        ),
        GlueTask(
            "WNLI",
            ("index", "sentence1", "sentence2", "label"),
            ("sentence1", "sentence2"),
            "label",
            ("0", "1"),
            "accuracy",
        ),
    )
}

_ALIASES = {"sst2": "SST-2", "stsb": "STS-B", "sts": "STS-B", "mnli-m": "MNLI", "mnli-mm": "MNLI"}


def glue_task(name: str) -> GlueTask:
    """The task named ``name`` (case and dashes ignored: "sst2", "SST-2", "sts-b" all work)."""
    key = name.replace("-", "").replace("_", "").lower()
    for task_name, task in GLUE_TASKS.items():
        if task_name.replace("-", "").lower() == key:
            return task
    if name.lower() in _ALIASES:
        return GLUE_TASKS[_ALIASES[name.lower()]]
    raise InputError(
        None, None, f"unknown GLUE task {name!r}; expected one of {', '.join(GLUE_TASKS)}"
    )


def glue_file(data_dir: str | Path, task: str | GlueTask, split: str) -> Path:
    """Path of ``split`` ("train", "dev", "test"; MNLI: "dev_matched" ...) under ``data_dir``.

    ``data_dir`` is either the GLUE root (holding ``TASK/``) or the task folder itself. For MNLI
    "dev" means "dev_matched" and "test" means "test_matched".
    """
    t = task if isinstance(task, GlueTask) else glue_task(task)
    if split not in t.files and f"{split}_matched" in t.files:
        split = f"{split}_matched"
    if split not in t.files:
        raise InputError(
            None, None, f"{t.name} has no split {split!r}; expected one of {', '.join(t.files)}"
        )
    root = Path(data_dir)
    if root.is_file():  # else "DIR/SST-2/train.tsv/SST-2/train.tsv: file not found"
        raise InputError(
            root, None, f"is a file, expected the GLUE folder (holding {t.name}/) or {t.name}/"
        )
    candidates = [root / t.name / t.files[split], root / t.files[split]]
    for c in candidates:
        if c.exists():
            return require_file(c)
    raise MissingFileError(
        candidates[0],
        None,
        f"file not found (expected the official GLUE layout {t.name}/{t.files[split]})",
    )


def read_glue_split(
    data_dir: str | Path, task: str | GlueTask, split: str
) -> list[ClassificationExample]:
    """Read one split of the official layout; see :func:`glue_file` and :func:`read_glue`.

    Train and dev splits must carry labels; test splits are read without.
    """
    t = task if isinstance(task, GlueTask) else glue_task(task)
    path = glue_file(data_dir, t, split)
    return read_glue(path, t, labelled=not path.name.startswith("test"))


def read_glue(
    path: str | Path, task: str | GlueTask, labelled: bool | None = None
) -> list[ClassificationExample]:
    """Read a GLUE TSV file of ``task``; test files (no label column) give ``label=None``.

    ``labelled``: True requires a label column, False requires the test format, None accepts
    either (told apart by the header). Raises InputError(path, line, ...) on a missing/unknown
    header, a row whose column count differs from the header's, or a label outside the task's
    label list. Empty texts are kept (the official QQP files hold a few).
    """
    return list(iter_glue(path, task, labelled))


def iter_glue(
    path: str | Path, task: str | GlueTask, labelled: bool | None = None
) -> Iterator[ClassificationExample]:
    """Stream the examples of :func:`read_glue`."""
    t = task if isinstance(task, GlueTask) else glue_task(task)
    rows = _tsv_rows(path)
    first = next(rows, None)
    if first is None:
        raise InputError(path, 1, f"empty file (expected a {t.name} TSV)")
    lineno, cols = first
    want = labelled
    if t.name == "CoLA" and cols != ["index", "sentence"] and want is not False:
        # train/dev: no header; the first line is already a row
        yield from _rows(path, t, _COLA_COLUMNS, [first], rows, labelled=True, width=4)
        return
    header = tuple(cols)
    labelled = t.label_column in header
    if want is not None and labelled != want:
        kind = "a labelled train/dev" if want else "an unlabelled test"
        layout = _show(t.header or _COLA_COLUMNS) if want else _show(_test_header(t))
        raise InputError(
            path, lineno, f"expected {kind} {t.name} file with header {layout}, got {_show(header)}"
        )
    expected = t.header if labelled and t.header else None
    if expected is not None and header[: len(expected)] != expected:
        raise InputError(
            path, lineno, f"expected the {t.name} header {_show(expected)}, got {_show(header)}"
        )
    missing = [c for c in t.text_columns if c not in header]
    if missing:
        raise InputError(
            path,
            lineno,
            f"expected a {t.name} header with columns {_show(_test_header(t))} (test) or "
            f"{_show(t.header or _COLA_COLUMNS)}, got {_show(header)}",
        )
    yield from _rows(path, t, header, [], rows, labelled=labelled, width=len(header))


def _test_header(t: GlueTask) -> tuple[str, ...]:
    return ("id" if t.name == "QQP" else "index", *t.text_columns)


def _rows(
    path: str | Path,
    t: GlueTask,
    header: tuple[str, ...],
    head: list[tuple[int, list[str]]],
    rest: Iterator[tuple[int, list[str]]],
    *,
    labelled: bool,
    width: int,
) -> Iterator[ClassificationExample]:
    text_idx = [header.index(c) for c in t.text_columns]
    label_idx = (
        (len(header) - 1 if t.name == "MNLI" else header.index(t.label_column))
        if labelled
        else None
    )
    guid_idx = next((header.index(c) for c in ("index", "id") if c in header), None)
    what = "tab-separated columns" + (
        "" if t.header or not labelled else " (source, label, original-label, sentence)"
    )
    for lineno, cols in (*head, *rest):
        if len(cols) != width:
            raise InputError(path, lineno, f"expected {width} {what}, got {len(cols)}")
        # empty texts are kept: the official QQP files hold a few empty questions and the
        # reference code accepts them; a shifted column is caught by the column count
        texts = [cols[i] for i in text_idx]
        label: int | float | None = None
        if label_idx is not None:
            label = _parse_label(path, lineno, t, cols[label_idx])
        guid = cols[guid_idx] if guid_idx is not None else str(lineno)
        yield ClassificationExample(
            guid, texts[0], texts[1] if len(texts) > 1 else None, label, lineno
        )


def _parse_label(path: str | Path, lineno: int, t: GlueTask, raw: str) -> int | float:
    if t.labels is None:
        try:
            score = float(raw)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise InputError(
                path, lineno, f"expected a numeric {t.label_column!r} score, got {raw!r}"
            )
        return score
    try:
        return t.labels.index(raw)
    except ValueError:
        raise InputError(
            path, lineno, f"expected a {t.name} label in {{{', '.join(t.labels)}}}, got {raw!r}"
        ) from None


def _tsv_rows(path: str | Path) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line, columns)`` of non-empty lines, split on tabs with no quote handling.

    Splitting on "\\t" is what ``csv.reader(delimiter="\\t", quotechar=None)`` does. A leading
    UTF-8 byte-order mark (MRPC ships one) is dropped.
    """
    for lineno, line in read_text_lines(path, drop_bom=True):
        if line.strip() == "":
            continue
        yield lineno, line.split("\t")


def _show(cols: tuple[str, ...] | list[str]) -> str:
    return "<TAB>".join(cols)
