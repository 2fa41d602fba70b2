"""SQuAD v1.1/v2.0 JSON reading, the char->word map, and malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.data.tasks.squad import context_words, load_gold, read_squad
from bertkit.errors import InputError

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_v11_examples():
    ex = read_squad(FIXTURES / "task_squad_v1.json")
    assert [e.qas_id for e in ex] == ["q1", "q2", "q3", "q4"]
    q2 = ex[1]
    assert q2.title == "Amazon" and not q2.is_impossible
    assert [a.text for a in q2.answers] == ["discharge volume of water", "discharge volume"]
    for e in ex:
        for a in e.answers:
            assert e.context[a.start : a.end] == a.text
    assert load_gold(ex)["q4"] == ["the Nobel Prize in Physics", "Nobel Prize in Physics"]


def test_v2_impossible_and_plausible():
    ex = read_squad(FIXTURES / "task_squad_v2.json")
    assert [e.is_impossible for e in ex] == [False, True, False, True]
    a2 = ex[1]
    assert a2.answers == () and [p.text for p in a2.plausible_answers] == ["Brazil"]
    assert load_gold(ex) == {"a1": ["Brazil"], "a2": [], "a3": ["1911"], "a4": []}


def test_context_words():
    words, c2w = context_words("ab  c\td")
    assert words == ["ab", "c", "d"]
    assert c2w == [0, 0, 0, 0, 1, 1, 2]
    assert context_words(" x")[1] == [0, 0]


def _dump(tmp_path: Path, obj) -> Path:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(obj, indent=1))
    return p


def _doc(qa: dict, context: str = "Paris is in France.") -> dict:
    return {
        "version": "1.1",
        "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [qa]}]}],
    }


def test_bad_json_names_line(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"data": [\n  {"title": "x",\n   "paragraphs": [}\n]}')
    with pytest.raises(InputError, match=r"bad\.json:3: invalid JSON at column 19"):
        read_squad(p)


@pytest.mark.parametrize(
    ("qa", "expected"),
    [
        (
            {"id": "q9", "answers": [{"text": "Paris", "answer_start": 0}]},
            "data[0].paragraphs[0].qas[0]: missing field 'question'",
        ),
        (
            {"id": "q9", "question": "Where?", "answers": [{"text": "Paris"}]},
            "data[0].paragraphs[0].qas[0].answers[0]: missing field 'answer_start'",
        ),
        (
            {
                "id": "q9",
                "question": "Where?",
                "answers": [{"text": "France", "answer_start": "13"}],
            },
            "expected 'answer_start' to be a int, got str",
        ),
        (
            {"id": "q9", "question": "Where?", "answers": [{"text": "France", "answer_start": 40}]},
            "expected answer_start in [0, 13]",
        ),
        (
            {"id": "q9", "question": "Where?", "answers": [{"text": "France", "answer_start": 0}]},
            "answers[0]: expected the answer 'France' at answer_start 0, the context there "
            "reads 'Paris '",
        ),
        (
            {"id": "q9", "question": "Where?", "answers": []},
            "expected at least one answer for a question without is_impossible=true",
        ),
        (
            {
                "id": "q9",
                "question": "Where?",
                "answers": [
                    {"text": "Paris", "answer_start": 0},
                    {"text": " ", "answer_start": 5},
                ],
            },
            "data[0].paragraphs[0].qas[0].answers[1]: question 'q9' has an empty answer text "
            "(expected the answer's words, as they stand in the context at answer_start)",
        ),
        (
            {"id": "q9", "question": "Where?", "is_impossible": "no", "answers": []},
            "expected 'is_impossible' to be true or false",
        ),
    ],
)
def test_malformed_questions_name_file_line_and_location(tmp_path, qa, expected):
    p = _dump(tmp_path, _doc(qa))
    line = next(i for i, t in enumerate(p.read_text().splitlines(), 1) if '"q9"' in t)
    with pytest.raises(InputError) as info:
        read_squad(p)
    assert str(info.value).startswith(f"{p}:{line}: ")
    assert expected in str(info.value)


def test_missing_data_and_paragraphs(tmp_path):
    with pytest.raises(InputError, match=r"missing field 'data' \(expected a SQuAD JSON file\)"):
        read_squad(_dump(tmp_path, {"version": "1.1"}))
    with pytest.raises(InputError, match=r"data\[0\]: missing field 'paragraphs'"):
        read_squad(_dump(tmp_path, {"data": [{"title": "x"}]}))
    with pytest.raises(InputError, match="file not found"):
        read_squad(tmp_path / "nope.json")


def test_a_duplicate_question_id_names_both_locations_and_its_line(tmp_path):
    """Predictions and scores are keyed by id: a second question with the same id would
    silently replace the first in predictions.json and the metrics."""
    qa = {"id": "q9", "question": "Where?", "answers": [{"text": "France", "answer_start": 12}]}
    doc = _doc(qa)
    doc["data"].append(
        {"title": "u", "paragraphs": [{"context": "Paris is in France.", "qas": [qa]}]}
    )
    p = _dump(tmp_path, doc)
    line = [i for i, t in enumerate(p.read_text().splitlines(), 1) if '"q9"' in t][1]
    with pytest.raises(InputError) as info:
        read_squad(p)
    assert str(info.value) == (
        f"{p}:{line}: data[1].paragraphs[0].qas[0]: duplicate question id 'q9', first at "
        "data[0].paragraphs[0].qas[0] (expected each id once)"
    )


def test_an_unanswerable_question_in_a_v1_task_names_the_v2_flag(tmp_path):
    """google's run_squad refuses is_impossible questions without --version_2_with_negative;
    bertkit's v1.1 task (finetune squad without --version-2-with-negative, and a v1.1 model's
    evaluate/predict) does too, naming the flag. Reading without a version accepts both."""
    assert [e.is_impossible for e in read_squad(FIXTURES / "task_squad_v2.json")][1]
    assert len(read_squad(FIXTURES / "task_squad_v2.json", version_2=True)) == 4
    assert len(read_squad(FIXTURES / "task_squad_v1.json", version_2=False)) == 4
    p = FIXTURES / "task_squad_v2.json"
    line = next(i for i, t in enumerate(p.read_text().splitlines(), 1) if '"a2"' in t)
    with pytest.raises(InputError) as info:
        read_squad(p, version_2=False)
    msg = str(info.value)
    assert msg.startswith(f"{p}:{line}: data[0].paragraphs[0].qas[1]: is_impossible is true")
    assert "--version-2-with-negative" in msg and "\n" not in msg


def test_the_adapter_reads_with_its_version(tmp_path):
    from bertkit.tasks.span_qa import SquadAdapter

    v2 = FIXTURES / "task_squad_v2.json"
    assert len(SquadAdapter("squad", "squad2", version_2=True).read(v2)) == 4
    with pytest.raises(InputError, match=r"is_impossible is true in a SQuAD v1\.1 task"):
        SquadAdapter("squad", "squad1").read(v2)


@pytest.mark.parametrize("question", ["", "   ", "\t\n", "\u3000"])
def test_an_empty_question_names_its_id(tmp_path, question):
    """A question with no text asks nothing: the model would be trained on (or scored for) a
    span it was never asked for. Refused like a duplicate id, in either SQuAD version."""
    qa = {"id": "q9", "question": question, "answers": [{"text": "Paris", "answer_start": 0}]}
    p = _dump(tmp_path, _doc(qa))
    line = next(i for i, t in enumerate(p.read_text().splitlines(), 1) if '"q9"' in t)
    for version_2 in (False, None):
        with pytest.raises(InputError) as info:
            read_squad(p, version_2=version_2)
        assert str(info.value) == (
            f"{p}:{line}: data[0].paragraphs[0].qas[0]: question 'q9' has an empty question "
            "text (expected the question to answer from the context)"
        )


@pytest.mark.parametrize(
    "qa",
    [
        {"id": "q9", "question": "Where?", "answers": [{"text": "", "answer_start": 0}]},
        {"id": "q9", "question": "Where?", "answers": [], "is_impossible": True},
    ],
    ids=["answered", "unanswerable"],
)
@pytest.mark.parametrize("context", ["", " \n "])
def test_an_empty_context_names_the_first_question_on_it(tmp_path, qa, context):
    """An empty context has no span to answer with: an unanswerable question on it, or an empty
    answer at its start, was read before, and the first question on it is what is named."""
    p = _dump(tmp_path, _doc(qa, context))
    line = next(i for i, t in enumerate(p.read_text().splitlines(), 1) if '"q9"' in t)
    with pytest.raises(InputError) as info:
        read_squad(p)
    assert str(info.value) == (
        f"{p}:{line}: data[0].paragraphs[0].qas[0]: question 'q9' is asked on an empty "
        "context (expected the paragraph's text to find the answer in)"
    )
