"""A tagging teacher under DDP (2 gloo processes): the ranks read whole documents of their own
(every second one), and every rank ends with all the word rows, variable-length per sentence,
equal to one process's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch.multiprocessing as mp

from bertkit.data.tasks.conll import read_conll
from bertkit.tasks.tagging import TaggingAdapter, tag_label_list
from bertkit.training import distill
from bertkit.training import distributed as D
from bertkit.training.distill_tokens import WordTeacher
from support.tiny_glue import FIXTURES, write_teacher

from ..helpers import free_port, join_gloo
from .test_distill_tokens import _char_vocab

CONLL = FIXTURES / "task_conll.txt"  # two documents: of 2 sentences and of 1


def _tagger(document_context: bool) -> TaggingAdapter:
    labels = tag_label_list(read_conll(CONLL))
    return TaggingAdapter("ner", "conll", 64, labels=labels, document_context=document_context)


def _rows(teacher: str, info: D.DistInfo | None, read: list[int]) -> WordTeacher:
    """The word rows of the fixture for a sentence-by-sentence student; ``read`` gets the
    number of windows this process's teacher ran."""
    real = distill.predict_rows

    def counting(model, adapter, features, **kw):
        read.append(len(features))
        return real(model, adapter, features, **kw)

    distill.predict_rows = counting
    try:
        got = distill.teacher_logits(
            teacher,
            _tagger(False),
            read_conll(CONLL),
            device="cpu",
            precision="fp32",
            batch_size=2,
            show_progress=False,
            log=lambda m: None,
            info=info,
        )
    finally:
        distill.predict_rows = real
    assert isinstance(got, WordTeacher)
    return got


def _worker(rank: int, world: int, port: int, teacher: str, out: str) -> None:
    info = join_gloo(rank, world, port)
    try:
        read: list[int] = []
        got = _rows(teacher, info, read)
        np.save(Path(out) / f"rank{rank}.npy", got.rows)
        np.save(Path(out) / f"starts{rank}.npy", got.unit_starts)
        (Path(out) / f"rank{rank}.json").write_text(json.dumps(read))
    finally:
        D.shutdown(info)
    D.exit_process(0)


def test_each_rank_reads_whole_documents_and_holds_every_word_row(tmp_path: Path) -> None:
    # the teacher reads documents whole (document context), the student sentence by sentence
    teacher = write_teacher(tmp_path / "teacher", _tagger(True), _char_vocab())
    alone: list[int] = []
    want = _rows(str(teacher), None, alone)
    assert alone == [2]  # one window per document
    sizes = [len(s.tokens) for s in read_conll(CONLL)]
    assert want.rows.shape[0] == sum(sizes) and list(want.unit_starts) == [0, 6, 11]
    out = tmp_path / "ranks"
    out.mkdir()
    mp.spawn(_worker, args=(2, free_port(), str(teacher), str(out)), nprocs=2, join=True)
    # rank 0 read the first document (one window), rank 1 the second
    assert [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)] == [[1], [1]]
    for r in range(2):
        # padded batches differ from the single process's: equal up to float rounding
        np.testing.assert_allclose(np.load(out / f"rank{r}.npy"), want.rows, rtol=1e-5, atol=1e-5)
        assert list(np.load(out / f"starts{r}.npy")) == [0, 6, 11]
