"""A distillation teacher under DDP (2 gloo processes): each rank reads every second training
example, not all of them, and every rank ends with all the rows, equal to one process's.
(The whole ``bertkit finetune --teacher`` job under torchrun: tests/training/finetune/test_finetune_ddp.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch.multiprocessing as mp

from bertkit.data.tasks.glue import read_glue_split
from bertkit.tasks import ClassificationAdapter
from bertkit.training import distill
from bertkit.training import distributed as D
from support.tiny_glue import write_sentiment, write_teacher

from ..helpers import free_port, join_gloo


def _student() -> ClassificationAdapter:
    return ClassificationAdapter("glue", "SST-2", 32, labels=["0", "1"])


def _rows(teacher: str, data: str, info: D.DistInfo | None, read: list[int]) -> np.ndarray:
    """The teacher's rows of the training set; ``read`` gets the number of features this
    process's teacher ran (predict_rows counted)."""
    real = distill.predict_rows

    def counting(model, adapter, features, **kw):
        read.append(len(features))
        return real(model, adapter, features, **kw)

    distill.predict_rows = counting
    try:
        return distill.teacher_logits(
            teacher,
            _student(),
            read_glue_split(Path(data), "SST-2", "train"),
            device="cpu",
            precision="fp32",
            batch_size=3,  # a rank's batches are not the single process's
            show_progress=False,
            log=lambda m: None,
            info=info,
        )
    finally:
        distill.predict_rows = real


def _worker(rank: int, world: int, port: int, teacher: str, data: str, out: str) -> None:
    """One gloo rank: its rows and features read to ``out/rank<r>.*`` (mp.spawn's target)."""
    info = join_gloo(rank, world, port)
    try:
        read: list[int] = []
        rows = _rows(teacher, data, info, read)
        np.save(Path(out) / f"rank{rank}.npy", rows)
        (Path(out) / f"rank{rank}.json").write_text(json.dumps(read))
    finally:
        D.shutdown(info)
    D.exit_process(0)  # as the bertkit program's ranks do: no interpreter finalization


@pytest.mark.parametrize("n_train", [13, 1])  # shares of 7 and 6; of 1 and none (rank 1 idle)
def test_each_rank_reads_its_share_and_holds_every_row(
    tiny_model: Path, tmp_path: Path, n_train: int
) -> None:
    data = write_sentiment(tmp_path / "glue", n_train=n_train, n_dev=4)
    vocab = (tiny_model / "vocab.txt").read_text(encoding="utf-8").split("\n")
    teacher = write_teacher(tmp_path / "teacher", _student(), [w for w in vocab if w])
    alone: list[int] = []
    want = _rows(str(teacher), str(data), None, alone)
    assert want.shape == (n_train, 2) and alone == [n_train]  # one window per example
    if n_train > 1:
        assert np.abs(want[:, 0] - want[:, 1]).std() > 1e-2  # rows differ: misplacing one shows

    out = tmp_path / "ranks"
    out.mkdir()
    args = (2, free_port(), str(teacher), str(data), str(out))
    mp.spawn(_worker, args=args, nprocs=2, join=True)
    # each rank's teacher read every second example, not the whole set (an empty share: nothing)
    shares = [[n] if n else [] for n in ((n_train + 1) // 2, n_train // 2)]
    assert [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)] == shares
    for r in range(2):
        got = np.load(out / f"rank{r}.npy")
        assert got.dtype == np.float32 and got.shape == want.shape
        # batches of another make-up round apart in the last bits (under the AVX2 cap: 8e-7)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
