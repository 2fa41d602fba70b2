"""SQuAD as JSON lines: one question a line, the layout Hugging Face ``datasets`` writes for its
``squad`` and ``squad_v2`` sets (``dataset.to_json``), and the shape ``/qa`` takes:

``{"id": "5733be28", "title": "...", "context": "...", "question": "...",
"answers": {"text": ["Saint Bernadette Soubirous"], "answer_start": [515]}}``

``answers`` may also be SQuAD's own list (``[{"text", "answer_start"}]``). Empty answers mark an
unanswerable question (SQuAD v2.0, as ``datasets`` writes one; ``"is_impossible": true`` says
the same); a line without ``answers`` is a question to predict only (``bertkit predict``),
refused for training and scoring. ``id`` defaults to the line number; ``title`` to "".
Each question is checked as :func:`bertkit.data.tasks.squad.read_squad` checks one, and an
error names the file and the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.data.tasks._rows import jsonl_rows
from bertkit.data.tasks.squad import SquadExample, _Reader
from bertkit.errors import InputError

_LAYOUT = (
    'expected {"question", "context"[, "id", "answers": {"text": [...], "answer_start": [...]}]}'
)


class _LineReader(_Reader):
    """:class:`_Reader`'s checks, each error on this record's line."""

    def __init__(self, path: Path, line: int) -> None:
        super().__init__(path, "")
        self.line = line

    def fail(self, where: str, message: str, hint: str | None) -> InputError:
        return InputError(self.path, self.line, (f"{where}: " if where else "") + message)


def read_squad_lines(path: str | Path, *, version_2: bool | None = None) -> list[SquadExample]:
    """The questions of a SQuAD JSON-lines file (module docstring); ``version_2`` as
    :func:`~bertkit.data.tasks.squad.read_squad`'s (False refuses an unanswerable question)."""
    path = Path(path)
    out: list[SquadExample] = []
    seen: dict[str, int] = {}
    for line, record in jsonl_rows(path):
        reader = _LineReader(path, line)
        qa = _native(reader, record, line)
        context = reader.field(record, "context", str, "", None)
        title = record.get("title") if isinstance(record.get("title"), str) else ""
        if "answers" in qa or qa.get("is_impossible"):
            ex = reader.example(qa, context, title, "")
        else:  # a question to answer, not to learn from: its texts checked as example() does
            ex = _unlabelled(reader, qa, context, title)
        if ex.qas_id in seen:
            raise reader.fail(
                "", f"duplicate question id {ex.qas_id!r}, first on line {seen[ex.qas_id]}", None
            )
        seen[ex.qas_id] = line
        if ex.is_impossible and version_2 is False:
            raise reader.fail(
                "",
                f"question {ex.qas_id!r} has no answer, which a SQuAD v1.1 task cannot give "
                "(expected answers; for SQuAD v2.0 finetune with --version-2-with-negative)",
                None,
            )
        out.append(ex)
    return out


def _native(reader: _LineReader, record: dict[str, Any], line: int) -> dict[str, Any]:
    """The record as one of SQuAD's own ``qas`` entries (answers as a list of objects; empty
    ``datasets`` answers as ``is_impossible``)."""
    qid = record.get("id", str(line))
    if isinstance(qid, int) and not isinstance(qid, bool):
        qid = str(qid)
    qa: dict[str, Any] = {"id": qid, "question": record.get("question")}
    if "question" not in record:
        raise reader.fail("", f"missing field 'question' ({_LAYOUT})", None)
    if "is_impossible" in record:
        qa["is_impossible"] = record["is_impossible"]
    if "answers" not in record:
        return qa
    answers = record["answers"]
    if isinstance(answers, dict):  # datasets: parallel lists
        texts, starts = answers.get("text"), answers.get("answer_start")
        if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
            raise reader.fail(
                "",
                "expected 'answers' to hold two lists of the same length, 'text' and "
                f"'answer_start', got {answers!r}"[:300],
                None,
            )
        answers = [{"text": t, "answer_start": s} for t, s in zip(texts, starts, strict=True)]
    if isinstance(answers, list) and not answers and "is_impossible" not in qa:
        qa["is_impossible"] = True  # datasets' squad_v2: no answer
    qa["answers"] = answers
    return qa


def _unlabelled(reader: _LineReader, qa: dict[str, Any], context: str, title: str) -> SquadExample:
    qas_id = reader.field(qa, "id", str, "", None)
    question = reader.field(qa, "question", str, "", None)
    if not question.strip():
        raise reader.fail("", f"question {qas_id!r} has an empty question text", None)
    if not context.strip():
        raise reader.fail("", f"question {qas_id!r} is asked on an empty context", None)
    return SquadExample(qas_id, question, context, (), False, (), title)
