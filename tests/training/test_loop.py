"""The generic Trainer: exact resume (with negative controls), NaN skips, spikes, accumulation."""

from __future__ import annotations

import json

import pytest
import torch

from bertkit.training.checkpoint import list_checkpoints
from bertkit.training.update import TrainingError

from .helpers import losses, make_trainer


def _weights(trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.core.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _interrupted(tmp_path, name, stop_after: int, **kw):
    """Train to ``stop_after`` steps (checkpointing every 3), then resume in a fresh Trainer."""
    run = tmp_path / name
    first = make_trainer(run, steps=8, **kw)
    _train_until(first, stop_after)
    # the run "dies" here: everything in memory is lost; a new process builds a new trainer
    torch.manual_seed(999)  # a different global RNG state, as in a fresh process
    second = make_trainer(run, steps=8, **kw)
    second.fit()
    return second, run


def _train_until(trainer, stop: int) -> None:
    """Run fit() but abort (like a kill) right after the step ``stop`` update."""

    class Killed(Exception):
        pass

    original = trainer._train_step

    def step(model):
        out = original(model)
        if trainer.step > stop:
            raise Killed
        return out

    trainer._train_step = step
    with pytest.raises(Killed):
        trainer.fit()


def test_resume_is_bit_identical(tmp_path):
    ref = make_trainer(tmp_path / "ref", steps=8)
    ref.fit()
    resumed, run = _interrupted(tmp_path, "run", stop_after=4)  # last checkpoint: step 3
    assert [p.name for p in list_checkpoints(run / "checkpoints")] == [
        "step-000000008",
        "step-000000006",
        "step-000000003",
    ]
    assert losses(run) == losses(tmp_path / "ref")
    assert len(losses(run)) == 8
    assert _same(_weights(resumed), _weights(ref))
    ref_opt, res_opt = ref.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert all(torch.equal(ref_opt[i][k], res_opt[i][k]) for i in ref_opt for k in ref_opt[i])


@pytest.mark.parametrize("drop", ["restore_rng", "restore_cursor"])
def test_resume_negative_controls_differ(tmp_path, drop):
    ref = make_trainer(tmp_path / "ref", steps=8)
    ref.fit()
    resumed, run = _interrupted(tmp_path, "run", stop_after=4, **{drop: False})
    assert losses(run)[:3] == losses(tmp_path / "ref")[:3]
    assert losses(run)[3:] != losses(tmp_path / "ref")[3:]
    assert not _same(_weights(resumed), _weights(ref))


def test_nan_update_is_skipped_like_a_dropped_batch(tmp_path):
    nan = make_trainer(tmp_path / "nan", steps=6, dropout=0.0, nan_at_attempts=frozenset({2}))
    result = nan.fit()
    control = make_trainer(tmp_path / "ctl", steps=6, dropout=0.0, drop_attempts=frozenset({2}))
    control.fit()
    plain = make_trainer(tmp_path / "plain", steps=6, dropout=0.0)
    plain.fit()
    assert result.step == 6 and result.skipped == 1
    records = [json.loads(x) for x in (tmp_path / "nan" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["type"] == "skip"] == [3]
    # the step counter and schedule did not advance: steps 1..6 each logged once, lr as usual
    train = [r for r in records if r["type"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6]
    plain_lr = [
        json.loads(x)["lr"]
        for x in (tmp_path / "plain" / "metrics.jsonl").read_text().splitlines()
        if json.loads(x)["type"] == "train"
    ]
    assert [r["lr"] for r in train] == plain_lr
    assert _same(_weights(nan), _weights(control))
    assert not _same(_weights(nan), _weights(plain))


def test_consecutive_nan_updates_abort(tmp_path):
    trainer = make_trainer(
        tmp_path / "r", steps=6, max_consecutive_skips=5, nan_at_attempts=frozenset(range(1, 50))
    )
    with pytest.raises(TrainingError, match="5 consecutive updates"):
        trainer.fit()
    assert trainer.step == 1


def test_loss_spike_is_reported(tmp_path):
    msgs: list[str] = []
    trainer = make_trainer(tmp_path / "r", steps=12, dropout=0.0)
    trainer._log = msgs.append
    original = trainer._train_step

    def step(model):
        out = original(model)
        if out is not None and trainer.step == 9:
            out.loss *= 3.0  # a synthetic 3x jump
        return out

    trainer._train_step = step
    trainer.fit()
    spikes = [m for m in msgs if "loss spike" in m]
    assert len(spikes) == 1 and "step 9" in spikes[0]


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    one = make_trainer(tmp_path / "a", steps=4, dropout=0.0)
    one.fit()
    four = make_trainer(tmp_path / "b", steps=4, dropout=0.0, grad_accum=4)
    four.fit()
    for (s1, l1), (s2, l2) in zip(losses(tmp_path / "a"), losses(tmp_path / "b"), strict=True):
        assert s1 == s2 and l1 == pytest.approx(l2, abs=1e-6)
    w1, w4 = _weights(one), _weights(four)
    assert all(torch.allclose(w1[k], w4[k], atol=1e-6) for k in w1)


def test_metrics_and_eval_records(tmp_path):
    trainer = make_trainer(tmp_path / "r", steps=4, eval_every=2, log_every=2)
    result = trainer.fit()
    records = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["type"] == "train"]
    assert [r["step"] for r in train] == [2, 4]
    for key in ("loss", "mlm_loss", "mlm_acc", "nsp_loss", "nsp_acc", "lr", "tokens_per_s"):
        assert all(key in r for r in train), key
    assert [r["step"] for r in records if r["type"] == "eval"] == [2, 4]
    assert result.final_eval is not None and 0.0 <= result.final_eval["mlm_acc"] <= 1.0


def _two_phase_trainer(run, seen: list[str], phase2_batch: int | None = None, **train_kw):
    from bertkit.training.loop import Phase

    from .helpers import collate, make_examples

    trainer = make_trainer(run, steps=8, **train_kw)
    short = [{**x, "source": "p1"} for x in make_examples(40)]
    long = [{**x, "source": "p2"} for x in make_examples(24, seed=5)]

    def spy(items, epochs):
        seen.extend(x["source"] for x in items)
        return collate(items, epochs)

    trainer.phases = [
        Phase(short, 6, "phase 1", spy),
        Phase(long, 2, "phase 2", spy, batch_size=phase2_batch),
    ]
    return trainer


def test_sequence_length_phases_switch_data_and_resume_exactly(tmp_path):
    seen: list[str] = []
    ref = _two_phase_trainer(tmp_path / "ref", seen)
    ref.fit()
    assert seen == ["p1"] * 6 * 8 + ["p2"] * 2 * 8
    run = tmp_path / "run"
    _train_until(_two_phase_trainer(run, []), 7)  # dies in phase 2; last checkpoint: step 6
    torch.manual_seed(999)
    resumed = _two_phase_trainer(run, seen2 := [])
    resumed.fit()
    assert seen2 == ["p2"] * 2 * 8
    assert losses(run) == losses(tmp_path / "ref")
    assert _same(_weights(resumed), _weights(ref))


@pytest.mark.parametrize("prefetch", [0, 2])
def test_phase_batch_size_is_used_and_resumes_exactly(tmp_path, prefetch):
    """Phase 2 with its own batch size (4, against 8): each update takes 4 of its examples, the
    prefetching thread asks for the same positions, and a run killed in phase 2 resumes to the
    uninterrupted run's losses and weights."""
    seen: list[str] = []
    ref = _two_phase_trainer(tmp_path / "ref", seen, phase2_batch=4, prefetch=prefetch)
    ref.fit()
    assert seen == ["p1"] * 6 * 8 + ["p2"] * 2 * 4
    run = tmp_path / "run"
    _train_until(_two_phase_trainer(run, [], phase2_batch=4, prefetch=prefetch), 7)
    resumed = _two_phase_trainer(run, seen2 := [], phase2_batch=4, prefetch=prefetch)
    resumed.fit()
    assert seen2 == ["p2"] * 2 * 4
    assert losses(run) == losses(tmp_path / "ref")
    assert _same(_weights(resumed), _weights(ref))


def test_phase_batch_size_must_divide_by_grad_accum(tmp_path):
    from bertkit.errors import ConfigError
    from bertkit.training.loop import Phase, Trainer

    from .helpers import collate, make_examples

    t = make_trainer(tmp_path / "r", steps=4, grad_accum=2)
    phases = [Phase(make_examples(8), 2), Phase(make_examples(8), 2, batch_size=3)]
    with pytest.raises(ConfigError, match="batch size 3 must be divisible"):
        Trainer(t.core, t.optimizer, t.schedule, phases, collate, t.cfg, tmp_path / "r2")


def test_bf16_evaluations_during_a_run_score_the_current_weights(tmp_path, bf16_path):
    """Held-out evaluations between updates under bf16 score the weights of that moment: the
    run's last evaluation equals one by a fresh copy of the final weights (the bf16 weight cache
    once kept the first evaluation's weights, since fused AdamW does not bump version counters)."""
    from bertkit.model import BertForPreTraining

    from .helpers import tiny_config

    trainer = make_trainer(tmp_path / "r", steps=6, lr=2e-2, eval_every=2, precision="bf16")
    result = trainer.fit()
    evals = [
        r
        for r in map(json.loads, (tmp_path / "r" / "metrics.jsonl").read_text().splitlines())
        if r["type"] == "eval"
    ]
    assert evals[0]["mlm_loss"] != pytest.approx(evals[-1]["mlm_loss"], abs=1e-3)  # it learned
    fresh = BertForPreTraining(tiny_config())
    fresh.load_state_dict(trainer.core.state_dict())
    trainer.core = fresh
    again = trainer.evaluate()
    assert again is not None and result.final_eval is not None
    assert again == pytest.approx(result.final_eval, rel=1e-6)


def _fake_clock(monkeypatch, trainer_box: list, start_up: float = 0.0, slowing: float = 0.0):
    """loop.py's clock (``time.time()`` and ``perf_counter()``) reads 1000 s plus one second per
    update done: a machine whose updates take exactly 1 s, after a first update that also spends
    ``start_up`` seconds, every update ``slowing`` x 100% slower for each 10 done. Evaluations
    and checkpoints take no time on it, so the pause kept back for the final one is 0 and the
    counts below do not depend on how busy the real machine is."""
    import types

    import bertkit.training.loop as loop

    def now() -> float:
        step = trainer_box[0].step
        return 1000.0 + step * (1 + slowing * (step // 10)) + (start_up if step else 0.0)

    fake = types.SimpleNamespace(time=now, perf_counter=now)
    monkeypatch.setattr(loop, "time", fake)


def _records(run, kind: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == kind]


def test_deadline_shrinks_the_schedule_and_ends_the_decay_on_time(tmp_path, monkeypatch):
    from bertkit.training.schedule import ScheduleConfig, lr_factor

    box: list = []
    _fake_clock(monkeypatch, box)
    kw = {"steps": 40, "log_every": 2, "save_every": 3, "end_by": 1020.5}
    box.append(make_trainer(tmp_path / "ref", **kw))
    result = box[0].fit()
    # measured from the first log line (update 2), at update 6 (two more windows) the rate is
    # 1 s/update: 14 more fit before 1020.5
    assert result.step == 20
    assert _records(tmp_path / "ref", "deadline") == [
        {"type": "deadline", "step": 6, "total_steps": 20, "was": 40}
    ]
    lrs = [r["lr"] for r in _records(tmp_path / "ref", "train")]
    # the warmup keeps its share: 2 of 40 planned, 1 of 20
    assert lrs[-1] == pytest.approx(1e-3 * lr_factor(19, ScheduleConfig(20, 1)))
    assert lrs[-1] < lrs[1] / 8  # the decay ran to (almost) zero at the new end

    # killed after the shrink and resumed: the checkpoint's shorter schedule is kept, exactly
    box[0] = make_trainer(tmp_path / "run", **kw)
    _train_until(box[0], 10)
    box[0] = make_trainer(tmp_path / "run", **kw)
    assert box[0].fit().step == 20
    assert losses(tmp_path / "run") == losses(tmp_path / "ref")


def test_deadline_rate_leaves_out_the_first_windows_start_up(tmp_path, monkeypatch):
    box: list = []
    _fake_clock(monkeypatch, box, start_up=10.0)
    box.append(make_trainer(tmp_path / "run", steps=40, log_every=2, end_by=1040.5))
    # at update 6 the clock reads 1016: 24 more updates of 1 s fit (a rate counted from the
    # loop's start, 14 s for the first 4 updates, would have cut the run to 11 at update 4)
    assert box[0].fit().step == 30
    assert [r["total_steps"] for r in _records(tmp_path / "run", "deadline")] == [30]


def test_deadline_shrinks_once_on_a_machine_slowing_a_little(tmp_path, monkeypatch):
    box: list = []
    _fake_clock(monkeypatch, box, slowing=0.004)
    box.append(make_trainer(tmp_path / "run", steps=100, log_every=2, end_by=1060.5))
    # 0.4% slower per 10 updates: the shrink at update 6 gives up 2% of what fits (59, not
    # 60), so the slowing rate does not cut one more update at a later line, and it ends in time
    assert box[0].fit().step == 59
    assert [(r["step"], r["total_steps"]) for r in _records(tmp_path / "run", "deadline")] == [
        (6, 59)
    ]
    import bertkit.training.loop as loop

    assert loop.time.time() <= 1060.5  # the fake clock after the last update


def test_deadline_far_away_or_absent_changes_nothing(tmp_path, monkeypatch):
    box: list = []
    _fake_clock(monkeypatch, box)
    box.append(make_trainer(tmp_path / "none", steps=12, log_every=2))
    assert box[0].fit().step == 12
    box[0] = make_trainer(tmp_path / "far", steps=12, log_every=2, end_by=1000.0 + 13)
    assert box[0].fit().step == 12
    assert _records(tmp_path / "far", "deadline") == []
    assert losses(tmp_path / "far") == losses(tmp_path / "none")


def test_deadline_already_past_ends_at_the_next_update_not_inside_warmup(tmp_path, monkeypatch):
    box: list = []
    _fake_clock(monkeypatch, box)
    box.append(make_trainer(tmp_path / "past", steps=40, log_every=1, end_by=900.0))
    # the guard's first look, at update 2 (the rate since update 1 ended is known there, and the
    # first decision at update 3 is more than half the time left away, since none is left): the
    # next update, 3, is the end; warmup is 2 updates, so the floor allows 3 (without the guard
    # the first decision, at update 3, ended it at 4)
    assert box[0].fit().step == 3
    assert [r["total_steps"] for r in _records(tmp_path / "past", "deadline")] == [3]


def test_one_skip_policy_for_pretraining_and_finetuning():
    from bertkit.training.finetune import FinetuneConfig
    from bertkit.training.settings import TrainConfig
    from bertkit.training.update import MAX_CONSECUTIVE_SKIPS, check_skips, skip_warning

    assert TrainConfig().max_consecutive_skips == MAX_CONSECUTIVE_SKIPS == 100
    assert FinetuneConfig().max_consecutive_skips == MAX_CONSECUTIVE_SKIPS
    assert skip_warning(7, 2, "lr 1e-05 seed 1: ") == (
        "warning: lr 1e-05 seed 1: non-finite loss or gradient at step 7; update skipped "
        "(2 in a row)"
    )
    check_skips(7, 2, 3)  # below the limit: nothing
    with pytest.raises(TrainingError) as stopped:
        check_skips(7, 3, 3)
    assert str(stopped.value) == (
        "3 consecutive updates had a non-finite loss or gradient (at step 7); lower the "
        "learning rate or check the data"
    )
