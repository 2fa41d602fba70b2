"""Distillation for token tagging (:mod:`bertkit.training.distill_tokens`): the loss against a
hand computation, micro-batches, and the teacher's rows aligned with the student's by words
when the two tokenizers cut the words into different pieces."""

from __future__ import annotations

import string
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit.data.tasks.conll import read_conll
from bertkit.errors import ConfigError
from bertkit.inference.task_model import TaskModel
from bertkit.model import BertForTokenClassification
from bertkit.tasks import FAMILIES, ClassificationAdapter
from bertkit.tasks.features import IGNORE_INDEX
from bertkit.tasks.tagging import TaggingAdapter, tag_label_list
from bertkit.tasks.windows import WindowConfig
from bertkit.tokenizer import BertTokenizer
from bertkit.training.distill import TEACHER_KEY, DistillLoss, check_distillable, teacher_logits
from bertkit.training.distill_tokens import (
    WordTeacher,
    agreement,
    gather_order,
    token_distill_loss,
)
from bertkit.training.update import UpdateStep
from support.tiny_glue import FIXTURES, SPECIALS, write_teacher

from ..helpers import VOCAB, tiny_config

CONLL = FIXTURES / "task_conll.txt"


# ---- the loss ----------------------------------------------------------------------------------


def test_loss_is_the_hand_computed_mix_over_labelled_words() -> None:
    g = torch.Generator().manual_seed(0)
    s = torch.randn(2, 4, 3, generator=g)
    labels = torch.tensor([[-100, 0, 2, -100], [-100, 1, -100, -100]])
    t = torch.full((2, 4, 3), float("nan"))
    t[0, 1], t[1, 1] = torch.tensor([2.0, -1.0, 0.5]), torch.tensor([0.0, 3.0, -2.0])
    # (0, 2) is labelled but its word was cut by the teacher's truncation: no row, no KL
    ce = F.cross_entropy(s.reshape(-1, 3), labels.reshape(-1), ignore_index=-100)
    alpha, temp = 0.3, 2.0

    def kl(a: torch.Tensor, b: torch.Tensor) -> float:  # KL(softmax(b/T) || softmax(a/T))
        p = [float(x) for x in torch.softmax(b / temp, -1)]
        q = [float(x) for x in torch.softmax(a / temp, -1)]
        return sum(pi * (np.log(pi) - np.log(qi)) for pi, qi in zip(p, q))

    soft = (kl(s[0, 1], t[0, 1]) + kl(s[1, 1], t[1, 1])) / 3  # 3 labelled words
    want = (1 - alpha) * float(ce) + alpha * temp**2 * soft
    got = token_distill_loss(s, t, ce, alpha, temp, labelled=3.0)
    assert float(got) == pytest.approx(want, rel=1e-5)
    # the teacher's own logits: no soft loss; alpha 0: the gold labels' loss exactly
    same = torch.where(torch.isnan(t), t, s)
    assert float(token_distill_loss(s, same, ce, 1.0, temp, 3.0)) == pytest.approx(0, abs=1e-6)
    assert torch.equal(token_distill_loss(s, t, ce, 0.0, temp, 3.0), ce)


def _update(micro_batches: list[dict[str, torch.Tensor]], objective) -> dict:
    torch.manual_seed(0)
    config = tiny_config(dropout=0.0)
    config.num_labels = 3
    model = BertForTokenClassification(config)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    step = UpdateStep(opt, objective, list(model.parameters()), "fp32", "cpu", clip_norm=1e9)
    assert step(model, micro_batches) is not None
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_micro_batches_give_the_whole_batchs_token_distillation_update() -> None:
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(5, VOCAB, (4, 6), generator=g)
    labels = torch.randint(0, 3, (4, 6), generator=g)
    labels[:, 0] = labels[:, -1] = -100
    labels[0, 2:] = -100  # micro-batches with different numbers of labelled words
    teacher = torch.randn(4, 6, 3, generator=g) * 3
    teacher[labels == -100] = float("nan")
    teacher[3, 2] = float("nan")  # a word the teacher did not read
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    batch[TEACHER_KEY] = teacher
    parts = [{k: v[:1] for k, v in batch.items()}, {k: v[1:] for k, v in batch.items()}]
    loss = DistillLoss(0.6, 2.0)
    whole, split = _update([batch], loss), _update(parts, loss)
    for k in whole:
        torch.testing.assert_close(split[k], whole[k], rtol=1e-5, atol=1e-6)
    hard = _update([batch], DistillLoss(0.0, 2.0))  # negative control: the teacher counts
    assert not torch.allclose(hard["classifier.weight"], whole["classifier.weight"])


# ---- the teacher's rows, word by word ----------------------------------------------------------


def _char_vocab() -> list[str]:
    """A vocabulary of single characters: the teacher cuts every word into letters."""
    chars = sorted(set(string.ascii_lowercase + string.digits + ".,-"))
    return SPECIALS + chars + ["##" + c for c in chars]


def _tagger(labels: list[str], max_len: int = 64, **windows) -> TaggingAdapter:
    return TaggingAdapter("ner", "conll", max_len, labels=labels, windows=WindowConfig(**windows))


def _teacher(tmp_path: Path, examples, **kw) -> tuple[Path, TaggingAdapter]:
    labels = tag_label_list(examples)
    student = _tagger(labels)
    folder = write_teacher(tmp_path / "teacher", _tagger(labels[::-1], **kw), _char_vocab())
    return folder, student


def _rows(folder: Path, student: TaggingAdapter, examples) -> WordTeacher:
    got = teacher_logits(
        folder, student, examples, device="cpu", precision="fp32", batch_size=2, log=print
    )
    assert isinstance(got, WordTeacher)
    return got


def test_teacher_rows_are_its_first_pieces_read_with_its_own_tokenizer(
    tiny_model: Path, tmp_path: Path
) -> None:
    examples = read_conll(CONLL)
    folder, student = _teacher(tmp_path, examples)
    got = _rows(folder, student, examples)
    teacher = TaskModel.load(folder, device="cpu", precision="fp32")
    tok, model = teacher.tokenizer, teacher.model
    k = len(student.labels)
    order = [teacher.adapter.labels.index(t) for t in student.labels]  # the student's columns
    start = 0
    for e in examples:  # a direct forward of each sentence, as the teacher cuts it
        pieces = [tok.encode_ids(w) for w in e.tokens]
        ids = [tok.cls_token_id, *[p for ps in pieces for p in ps], tok.sep_token_id]
        firsts = np.cumsum([1] + [len(p) for p in pieces])[:-1]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].numpy()
        want = logits[firsts][:, order]
        np.testing.assert_allclose(got.rows[start : start + len(e.tokens)], want, atol=1e-5)
        start += len(e.tokens)
    assert got.rows.shape == (start, k) and not np.isnan(got.rows).any()
    # the student's features hold the rows at its own first pieces, which are elsewhere
    student_tok = BertTokenizer.from_pretrained(tiny_model)
    feats = student.encode(student_tok, examples, training=True)
    targets = got.targets(feats, max(len(f.input_ids) for f in feats))
    assert any(len(tok.encode_ids(w)) > 1 for w in examples[0].tokens)
    start = 0
    for f, e in zip(feats, examples):
        labelled = [p for p, label in enumerate(f.labels) if label != IGNORE_INDEX]
        assert [f.word_ids[p] for p in labelled] == list(range(len(e.tokens)))
        np.testing.assert_array_equal(
            targets[f.example_index, labelled], got.rows[start:][: len(labelled)]
        )
        unlabelled = np.setdiff1d(np.arange(targets.shape[1]), labelled)
        assert np.isnan(targets[f.example_index, unlabelled]).all()
        start += len(e.tokens)


def test_a_windowed_teacher_reads_each_word_where_its_prediction_does(tmp_path: Path) -> None:
    examples = read_conll(CONLL)
    # windows of 6 letters: every word of a sentence is in several windows
    folder, student = _teacher(tmp_path, examples, max_len=8, doc_stride=3)
    got = _rows(folder, student, examples)
    teacher = TaskModel.load(folder, device="cpu", precision="fp32")
    assert len(teacher.prepare(examples).features) > 3 * len(examples)
    predicted = [t for p in teacher.run(examples).predictions for t in p["tags"]]
    assert [student.labels[i] for i in got.rows.argmax(-1)] == predicted


def test_words_cut_by_the_teachers_truncation_get_no_row_and_are_counted(
    tiny_model: Path, tmp_path: Path
) -> None:
    examples = read_conll(CONLL)
    folder, student = _teacher(tmp_path, examples, max_len=12, truncate=True)
    got = _rows(folder, student, examples)
    read = ~np.isnan(got.rows).any(-1)
    assert read[0] and not read.all()  # each sentence's first word is read, late ones are not
    feats = student.encode(BertTokenizer.from_pretrained(tiny_model), examples, training=True)
    words = sum(len(e.tokens) for e in examples)
    assert got.coverage(feats) == {
        "words": words,
        "labelled": words,
        "distilled": int(read.sum()),
        "student_truncated": 0,
        "teacher_truncated": words - int(read.sum()),
    }
    # and the student's: a student of 4 pieces a window, truncated, labels 2 words a sentence
    short = _tagger(student.labels, max_len=4, truncate=True)
    feats = short.encode(BertTokenizer.from_pretrained(tiny_model), examples, training=True)
    assert got.coverage(feats)["labelled"] == 2 * len(examples)


def test_documents_are_read_whole_by_one_rank() -> None:
    assert gather_order([[0, 1], [2], [3, 4]], 0, 2) == [0, 1, 3, 4]
    assert gather_order([[0, 1], [2], [3, 4]], 1, 2) == [2]
    assert gather_order([[0], [1]], 1, 3) == [1] and gather_order([[0], [1]], 2, 3) == []


def test_agreement_is_the_share_of_read_words_whose_argmax_is_gold() -> None:
    labels = ["O", "B-PER", "I-PER"]
    rows = np.array(
        [[3, 1, 0], [2, 0, 1], [np.nan] * 3, [0, 0, 5], [1, 0, 0]], dtype=np.float32
    )  # argmax O, O, (not read), I-PER, O
    examples = [SimpleNamespace(tags=["O", "O"]), SimpleNamespace(tags=["B-PER", "I-PER", "B-PER"])]
    teacher = WordTeacher.of([rows[:2], rows[2:]], [[0], [1]], 3)
    assert agreement(teacher, examples, labels) == pytest.approx(3 / 4)  # words 0, 1, 3 of 4 read
    unread = WordTeacher.of([np.full((2, 3), np.nan, np.float32)], [[0]], 3)
    assert np.isnan(agreement(unread, examples[:1], labels))


def test_a_teacher_of_another_kind_or_label_set_is_refused(tmp_path: Path) -> None:
    examples = read_conll(CONLL)
    labels = tag_label_list(examples)
    classifier = ClassificationAdapter("glue", "SST-2", 32, labels=labels)
    folder = write_teacher(tmp_path / "c", classifier, _char_vocab())
    with pytest.raises(
        ConfigError, match=r"glue model; a token tagger \(finetune ner or tag\) is needed"
    ):
        _rows(folder, _tagger(labels), examples)
    other = write_teacher(tmp_path / "t", _tagger(["O", "B-X"]), _char_vocab())
    with pytest.raises(ConfigError, match=r"labels \['O', 'B-X'\]; the student's task has"):
        _rows(other, _tagger(labels), examples)


def test_check_distillable_takes_taggers_and_refuses_spans_choices_and_embeddings() -> None:
    for family in ("glue", "classify", "ner", "tag"):
        check_distillable(FAMILIES[family][0], family)
    assert FAMILIES["ner"][0] is FAMILIES["tag"][0] is TaggingAdapter
    for family in ("squad", "swag", "embeddings", "rerank"):
        with pytest.raises(ConfigError) as e:
            check_distillable(FAMILIES[family][0], family)
        assert str(e.value) == (
            "a teacher (--teacher) distils sequence classification and regression (finetune "
            "glue, classify) and token tagging (finetune ner, tag); "
            f"finetune {family} is not supported"
        )


def test_a_document_context_student_finds_each_sentences_rows(
    tiny_model: Path, tmp_path: Path
) -> None:
    examples = read_conll(CONLL)
    folder, student = _teacher(tmp_path, examples)
    joined = TaggingAdapter("ner", "conll", 64, labels=student.labels, document_context=True)
    got = _rows(folder, joined, examples)
    assert list(got.unit_starts) == [0, 11]  # documents of 6 + 5 words and of 6
    feats = joined.encode(BertTokenizer.from_pretrained(tiny_model), examples, training=True)
    assert [f.example_index for f in feats] == [0, 1]
    targets = got.targets(feats, max(len(f.input_ids) for f in feats))
    taught = [
        targets[i, : len(f.labels)][[label != IGNORE_INDEX for label in f.labels]]
        for i, f in enumerate(feats)
    ]
    np.testing.assert_array_equal(np.concatenate(taught), got.rows)  # every word, in order
