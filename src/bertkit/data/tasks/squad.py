"""SQuAD v1.1 / v2.0 JSON reading and the character <-> whitespace-word mapping.

The file layout is ``{"version", "data": [{"title", "paragraphs": [{"context", "qas": [{"id",
"question", "answers": [{"text", "answer_start"}], "is_impossible"?, "plausible_answers"?}]}]}]}``.
Or JSON lines, one question a line, as Hugging Face ``datasets`` writes ``squad`` and
``squad_v2`` (:func:`read_squad_lines`). Feature conversion (sliding windows) is in
:mod:`bertkit.tasks.squad_features`, span search and the v2.0 null threshold in
:mod:`bertkit.tasks.squad_post`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.tasks._rows import jsonl_rows
from bertkit.errors import InputError
from bertkit.io import format_suffix, read_bytes


@dataclass(frozen=True)
class SquadAnswer:
    """An answer: its text and the character offset where it starts in the context."""

    text: str
    start: int

    @property
    def end(self) -> int:
        """Exclusive end character."""
        return self.start + len(self.text)


@dataclass(frozen=True)
class SquadExample:
    """One question on one context.

    ``answers`` are the gold answers (empty for v2.0 unanswerable questions, which instead may
    carry ``plausible_answers``). Training uses ``answers[0]``; evaluation takes the max over all.
    """

    qas_id: str
    question: str
    context: str
    answers: tuple[SquadAnswer, ...]
    is_impossible: bool = False
    plausible_answers: tuple[SquadAnswer, ...] = ()
    title: str = ""


def read_squad(path: str | Path, *, version_2: bool | None = None) -> list[SquadExample]:
    """Read a SQuAD v1.1 or v2.0 JSON file.

    ``version_2=False`` (a v1.1 task) refuses a question with ``"is_impossible": true``, as
    google's run_squad does without ``--version_2_with_negative``: a v1.1 model never answers
    "no answer", so it would be trained towards, or scored against, an answer it cannot give.
    ``None`` reads both versions.

    Raises InputError naming the file, the line (of the offending question's id where it can be
    found), the JSON location (``data[i].paragraphs[j].qas[k]``) and what was expected: bad JSON,
    a missing field, an answerable question without answers, an ``answer_start`` outside the
    context, an answer whose text is not the context's at its ``answer_start`` (google's
    run_squad skips those with a warning; here they are refused, never trained on a wrong span),
    a question whose text or context is empty or only whitespace (nothing to ask, or nothing
    to answer from), an answerable question with an empty answer text, or a question id used
    twice (predictions and scores are keyed by id: one would hide the other).
    A leading byte-order mark is dropped; a ``.gz``, ``.xz`` or ``.bz2`` file is decompressed.
    A ``.jsonl`` file is one question a line (:func:`read_squad_lines`: the layout Hugging Face
    ``datasets`` writes).
    """
    path = Path(path)
    if format_suffix(path) == ".jsonl":
        return read_squad_lines(path, version_2=version_2)
    data = read_bytes(path)
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(path, line, "invalid UTF-8 (expected a UTF-8 SQuAD JSON file)") from e
    raw = raw.removeprefix("\ufeff")  # a byte-order mark (Windows editors write one)
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise InputError(
            path,
            e.lineno,
            f"invalid JSON at column {e.colno}: {e.msg} (expected a SQuAD JSON file)",
        ) from e
    reader = _Reader(path, raw)
    data = reader.field(doc, "data", list, "", None)
    out: list[SquadExample] = []
    seen: dict[str, str] = {}  # question id -> where it first was
    for i, article in enumerate(data):
        where = f"data[{i}]"
        title = article.get("title", "") if isinstance(article, dict) else ""
        for j, para in enumerate(reader.field(article, "paragraphs", list, where, None)):
            pwhere = f"{where}.paragraphs[{j}]"
            context = reader.field(para, "context", str, pwhere, None)
            for k, qa in enumerate(reader.field(para, "qas", list, pwhere, None)):
                qwhere = f"{pwhere}.qas[{k}]"
                ex = reader.example(qa, context, title, qwhere)
                if ex.qas_id in seen:
                    raise InputError(
                        path,
                        reader.line_of_id(ex.qas_id, 2),
                        f"{qwhere}: duplicate question id {ex.qas_id!r}, first at "
                        f"{seen[ex.qas_id]} (expected each id once)",
                    )
                seen[ex.qas_id] = qwhere
                if ex.is_impossible and version_2 is False:
                    raise reader.fail(
                        qwhere,
                        "is_impossible is true in a SQuAD v1.1 task, which has no unanswerable "
                        "questions (expected answers; for SQuAD v2.0 finetune with "
                        "--version-2-with-negative)",
                        ex.qas_id,
                    )
                out.append(ex)
    return out


class _Reader:
    """Field access that turns a missing/mistyped field into an InputError with a line number."""

    def __init__(self, path: Path, raw: str) -> None:
        self.path, self.raw = path, raw

    def line_of(self, needle: str | None) -> int | None:
        """Line of the first occurrence of ``needle`` (JSON-encoded) in the file, if any."""
        if not needle:
            return None
        pos = self.raw.find(json.dumps(needle)[1:-1])
        return None if pos < 0 else self.raw.count("\n", 0, pos) + 1

    def line_of_id(self, qas_id: str, occurrence: int) -> int | None:
        """Line of the ``occurrence``-th ``"id"`` string equal to ``qas_id``, if found."""
        pos = -1
        for needle in (json.dumps(qas_id, ensure_ascii=False), json.dumps(qas_id)):
            pos = -1
            for _ in range(occurrence):
                pos = self.raw.find(needle, pos + 1)
                if pos < 0:
                    break
            if pos >= 0:
                break
        return None if pos < 0 else self.raw.count("\n", 0, pos) + 1

    def fail(self, where: str, message: str, hint: str | None) -> InputError:
        prefix = f"{where}: " if where else ""
        return InputError(self.path, self.line_of(hint), prefix + message)

    def field(self, obj: Any, key: str, kind: type, where: str, hint: str | None) -> Any:
        if not isinstance(obj, dict):
            raise self.fail(where, f"expected a JSON object, got {type(obj).__name__}", hint)
        if key not in obj:
            raise self.fail(where, f"missing field {key!r} (expected a SQuAD JSON file)", hint)
        value = obj[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            raise self.fail(
                where, f"expected {key!r} to be a {kind.__name__}, got {type(value).__name__}", hint
            )
        return value

    def answers(
        self, qa: dict, key: str, context: str, where: str, hint: str
    ) -> tuple[SquadAnswer, ...]:
        out = []
        for n, ans in enumerate(self.field(qa, key, list, where, hint) if key in qa else []):
            awhere = f"{where}.{key}[{n}]"
            text = self.field(ans, "text", str, awhere, hint)
            start = self.field(ans, "answer_start", int, awhere, hint)
            if not 0 <= start <= len(context) - len(text):
                raise self.fail(
                    awhere,
                    f"expected answer_start in [0, {len(context) - len(text)}] (the answer "
                    f"{text!r} must lie inside the {len(context)}-character context), got {start}",
                    hint,
                )
            found = context[start : start + len(text)]
            if key == "answers" and found != text:
                raise self.fail(
                    awhere,
                    f"expected the answer {text!r} at answer_start {start}, the context there "
                    f"reads {found!r}",
                    hint,
                )
            out.append(SquadAnswer(text, start))
        return tuple(out)

    def example(self, qa: Any, context: str, title: str, where: str) -> SquadExample:
        hint = qa.get("id") if isinstance(qa, dict) and isinstance(qa.get("id"), str) else None
        qas_id = self.field(
            qa, "id", str, where, hint or (qa.get("question") if isinstance(qa, dict) else None)
        )
        question = self.field(qa, "question", str, where, hint)
        if not question.strip():
            raise self.fail(
                where,
                f"question {qas_id!r} has an empty question text (expected the question to "
                "answer from the context)",
                hint,
            )
        if not context.strip():
            raise self.fail(
                where,
                f"question {qas_id!r} is asked on an empty context (expected the paragraph's "
                "text to find the answer in)",
                hint,
            )
        impossible = qa.get("is_impossible", False)
        if not isinstance(impossible, bool):
            raise self.fail(
                where, f"expected 'is_impossible' to be true or false, got {impossible!r}", hint
            )
        if "answers" not in qa and not impossible:
            raise self.fail(where, "missing field 'answers' (expected a SQuAD JSON file)", hint)
        answers = self.answers(qa, "answers", context, where, hint)
        if not answers and not impossible:
            raise self.fail(
                where,
                "expected at least one answer for a question without is_impossible=true",
                hint,
            )
        blank = next((i for i, a in enumerate(answers) if not a.text.strip()), None)
        if blank is not None and not impossible:  # a span of no words: no start or end to learn
            raise self.fail(
                f"{where}.answers[{blank}]",
                f"question {qas_id!r} has an empty answer text (expected the answer's words, "
                "as they stand in the context at answer_start)",
                hint,
            )
        plausible = self.answers(qa, "plausible_answers", context, where, hint)
        return SquadExample(
            qas_id, question, context, () if impossible else answers, impossible, plausible, title
        )


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
    """The questions of a SQuAD JSON-lines file: one a line, the layout Hugging Face ``datasets``
    writes for ``squad`` and ``squad_v2`` (``dataset.to_json``):
    ``{"id", "title", "context", "question", "answers": {"text": [...], "answer_start": [...]}}``.

    ``answers`` may also be SQuAD's own list (``[{"text", "answer_start"}]``). Empty answers mark
    an unanswerable question (SQuAD v2.0, as ``datasets`` writes one; ``"is_impossible": true``
    says the same); a line without ``answers`` is a question to predict only, refused for
    training and scoring (:meth:`~bertkit.tasks.span_qa.SquadAdapter.missing_label`). ``id``
    defaults to the line number, ``title`` to "". Each question is checked as :func:`read_squad`
    checks one, an error naming the file and the line; ``version_2`` as there."""
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


def is_whitespace(c: str) -> bool:
    """google's SQuAD whitespace test (includes the narrow no-break space U+202F)."""
    return c in " \t\r\n" or ord(c) == 0x202F


def context_words(context: str) -> tuple[list[str], list[int]]:
    """Split ``context`` on whitespace; also return the word index of every character.

    Whitespace characters map to the preceding word (the first word for leading whitespace),
    as in google's run_squad. Example: ``"ab  c"`` -> ``(["ab", "c"], [0, 0, 0, 0, 1])``.
    """
    words: list[str] = []
    char_to_word: list[int] = []
    prev_ws = True
    for c in context:
        if is_whitespace(c):
            prev_ws = True
        else:
            if prev_ws:
                words.append(c)
            else:
                words[-1] += c
            prev_ws = False
        char_to_word.append(max(len(words) - 1, 0))
    return words, char_to_word


def load_gold(examples: list[SquadExample]) -> dict[str, list[str]]:
    """``qas_id -> gold answer texts`` (an empty list for unanswerable questions), for scoring."""
    return {e.qas_id: [a.text for a in e.answers] for e in examples}
