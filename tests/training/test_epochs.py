"""Fine-tuning's data order as the one Trainer's batch source (``training/epochs.py``): the
reference order, prefetch keys across epochs, the exactly-once sums, the empty share, and a
Trainer run on epochs that ends when the data are used up (skips included)."""

from __future__ import annotations

import torch

from bertkit.model import BertForPreTraining
from bertkit.training.distributed import DistInfo
from bertkit.training.epochs import EpochBatches, length_bucketed_batches
from bertkit.training.faults import Faults
from bertkit.training.loop import TrainConfig, Trainer
from bertkit.training.optim import OptimizerConfig, build_optimizer
from bertkit.training.schedule import ScheduleConfig
from bertkit.training.update import MicroBatch

from .helpers import collate, make_examples, tiny_config


def _source(n: int, batch: int, epochs: int, info: DistInfo | None = None, seed: int = 3):
    feats = list(range(n))
    return EpochBatches(
        feats,
        [1 + i % 5 for i in feats],
        lambda items, length, _draws: {"input_ids": torch.tensor([[1 + i] for i in items])},
        batch_size=batch,
        epochs=epochs,
        bucket_batches=1,
        generator=torch.Generator().manual_seed(seed),
        info=info or DistInfo(),
    )


def _prepare(batch: dict[str, torch.Tensor]) -> MicroBatch:
    return MicroBatch(
        batch, [float(batch["input_ids"].shape[0])], float(batch["input_ids"].numel())
    )


def _walk(src: EpochBatches) -> list[tuple[tuple[int, int], list[int], bool]]:
    """(key, the indices trained on, whether the epoch ended) of every batch, in order."""
    out = []
    while (key := src.next_key(0)) is not None:
        ids = src.make(key, _prepare)[0].inputs["input_ids"].flatten().tolist()
        src.advance()
        out.append((key, [i - 1 for i in ids], src.epoch_ended))
    return out


def test_each_epoch_is_a_fresh_permutation_in_the_reference_order():
    walked = _walk(_source(10, 4, 3))
    gen = torch.Generator().manual_seed(3)
    expected = []
    for e in range(3):
        batches = length_bucketed_batches([0] * 10, 4, gen, 1)  # the RandomSampler order
        expected += [((e, k), b, k == len(batches) - 1) for k, b in enumerate(batches)]
    assert walked == expected
    assert [len(b) for _, b, _ in walked[:3]] == [4, 4, 2]  # the last batch is smaller
    assert walked[0][1] != walked[3][1]  # another epoch, another order


def test_ranks_take_disjoint_shares_of_the_same_global_batches():
    one = _walk(_source(10, 4, 2))
    ranks = [_walk(_source(10, 4, 2, DistInfo(rank=r, world_size=2))) for r in range(2)]
    for k, (key, whole, ended) in enumerate(one):
        assert ranks[0][k][0] == ranks[1][k][0] == key
        assert ranks[0][k][1] + ranks[1][k][1] == whole
        assert ranks[0][k][2] == ranks[1][k][2] == ended


def test_micro_batches_of_ranks_cut_every_batch_once_and_empty_ones_weigh_nothing():
    def source(rank: int, world: int):
        src = _source(10, 4, 1, DistInfo(rank=rank, world_size=world))
        src.grad_accum = 2  # before anything is drawn
        return src

    whole = [b for _, b, _ in _walk(_source(10, 4, 1))]  # batches of 4, 4 and 2
    parts = {(r, w): source(r, w) for w in (1, 2) for r in range(w)}
    for k, key in enumerate([(0, 0), (0, 1), (0, 2)]):
        for world in (1, 2):
            micros = [parts[r, world].make(key, _prepare) for r in range(world)]
            # micro-step j of rank r takes slice j * world + r of the batch
            got = [
                [i - 1 for i in micros[r][j].inputs["input_ids"].flatten().tolist()]
                for j in range(2)
                for r in range(world)
            ]
            weights = [micros[r][j].counts[0] for j in range(2) for r in range(world)]
            real = [ids for ids, w in zip(got, weights) if w > 0]
            assert [i for ids in real for i in ids] == whole[k], (key, world)
    last = [parts[r, 2].make((0, 2), _prepare) for r in range(2)]  # 2 examples in 4 slices
    # slices 0..3 hold 0, 1, 0, 1 examples: rank 0 takes slices 0 and 2, both empty
    assert [[m.counts[0] for m in last[r]] for r in range(2)] == [[0.0, 0.0], [1.0, 1.0]]
    assert all(len(m) == 2 for m in last)  # every rank runs both micro-steps


def test_upcoming_keys_cross_epochs_and_stop_at_the_end():
    src = _source(5, 2, 2)  # 3 batches an epoch
    assert src.next_key(0) == (0, 0)
    assert src.upcoming(0, 4) == [(0, 1), (0, 2), (1, 0), (1, 1)]
    for _ in range(4):
        src.advance()
    assert src.next_key(0) == (1, 1)
    assert src.upcoming(0, 4) == [(1, 2)]
    src.advance()
    src.advance()
    assert src.next_key(0) is None and src.upcoming(0, 3) == []


def test_seen_sums_one_epoch_and_restart_with_the_next():
    src = _source(7, 3, 2)
    ends = []
    while src.next_key(0) is not None:
        src.advance()
        if src.epoch_ended:
            ends.append(list(src.seen))
    full = [7.0, float(sum(range(7))), float(sum(i * i for i in range(7)))]
    assert ends == [full, full]


def test_an_empty_share_runs_one_example_with_weight_zero():
    src = _source(5, 4, 1, DistInfo(rank=0, world_size=2))  # batches of 4 and 1: rank 0 gets none
    src.advance()
    last = src.make(src.next_key(0), _prepare)[0]
    assert last.counts == [0.0] and last.tokens == 0.0
    assert last.inputs["input_ids"].shape == (1, 1)  # one example, so DDP's collectives match


def test_a_trainer_on_epochs_ends_when_its_batches_are_used_up(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # without a run_dir nothing is written, here or anywhere
    torch.manual_seed(0)
    model = BertForPreTraining(tiny_config(0.0))
    data = make_examples(10)
    src = EpochBatches(
        data,
        [len(x["input_ids"]) for x in data],
        lambda items, length, _draws: collate(items, [0] * len(items)),
        batch_size=4,
        epochs=2,
        bucket_batches=1,
        generator=torch.Generator().manual_seed(1),
        info=DistInfo(),
    )
    seen: list[tuple[int, bool, bool]] = []
    trainer = Trainer(
        model,
        build_optimizer(model, OptimizerConfig(lr=1e-3)),
        ScheduleConfig(6, 1),
        None,
        None,
        TrainConfig(batch_size=4, log_every=2, show_progress=False),
        None,
        log=lambda m: None,
        batches=src,
        on_update=lambda t, stats: seen.append((t.step, stats is None, src.epoch_ended)),
        faults=Faults(nan_at_attempts=frozenset({1})),  # the second update is skipped
        name="lr 0.001 seed 1",
    )
    result = trainer.fit()
    # 3 batches an epoch, 6 in all: one skipped, so 5 updates of the 6 planned, then the data end
    assert result.step == 5 and result.skipped == 1
    assert seen == [
        (1, False, False),
        (1, True, False),
        (2, False, True),
        (3, False, False),
        (4, False, False),
        (5, False, True),
    ]
    assert trainer.metrics is None and list(tmp_path.iterdir()) == []


def _drawing_source(seed: int, grad_accum: int = 1, rank: int = 0) -> EpochBatches:
    """A source whose collate returns one number drawn from the generator it is given."""
    return EpochBatches(
        list(range(8)),
        [1] * 8,
        lambda items, length, draws: {"input_ids": torch.randint(1 << 30, (1, 1), generator=draws)},
        batch_size=4,
        epochs=2,
        bucket_batches=1,
        generator=torch.Generator().manual_seed(seed),
        info=DistInfo(rank=rank, world_size=2),
        grad_accum=grad_accum,
    )


def _drawn(src: EpochBatches, key: tuple[int, int]) -> list[int]:
    return [int(m.inputs["input_ids"]) for m in src.make(key, _prepare)]


def test_each_micro_batch_draws_from_a_generator_of_its_own_place():
    """rerank's in-batch negatives: the draws depend on the seed and the micro-batch's place
    alone, not on what was made before (prefetching, a resumed run making a later key first)."""
    src = _drawing_source(3, grad_accum=2)
    later = _drawn(src, (1, 1))  # made first, as a resumed run would
    first = _drawn(src, (0, 0))
    again = _drawing_source(3, grad_accum=2)
    assert _drawn(again, (0, 0)) == first and _drawn(again, (1, 1)) == later
    assert len({*first, *later}) == 4  # each micro-batch and batch its own stream
    assert _drawn(_drawing_source(4, grad_accum=2), (0, 0)) != first  # the seed counts
    assert _drawn(_drawing_source(3, grad_accum=2, rank=1), (0, 0)) != first  # and the rank
