"""A gloo rank that trains the tiny setup and records which instances it was given (for
test_ddp_coverage.py; a module-level function so torch.multiprocessing.spawn can import it)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

N_EXAMPLES = 40


def coverage_worker(
    rank: int, world: int, port: int, run_dir: str, steps: int, tag: str, stop: int | None
) -> None:
    """Train ``steps`` updates (dying after update ``stop + 1`` when given), appending one JSON line
    ``{"step": s, "uids": [...], "epochs": [...]}`` per micro-batch to ``seen-<tag>-rank<r>.jsonl``."""
    from bertkit.training import distributed as D
    from bertkit.training.loop import Phase
    from training.helpers import (
        Stop,
        collate,
        join_gloo,
        make_examples,
        make_trainer,
        stop_after,
    )

    info = join_gloo(rank, world, port)
    log = Path(run_dir) / f"seen-{tag}-rank{rank}.jsonl"
    try:
        trainer = make_trainer(Path(run_dir), steps=steps, info=info, dropout=0.0)
        data = [{**x, "uid": i} for i, x in enumerate(make_examples(N_EXAMPLES))]

        # Batches are collated ahead (prefetch): the step a batch is for comes from its
        # position in the stream, not from the step the trainer is at when it is collated.
        make, making = trainer._make_micro_batches, {}

        def made(phase_index, position):
            making["step"] = position // trainer.cfg.batch_size + 1
            return make(phase_index, position)

        trainer._make_micro_batches = made

        def spy(items, epochs):
            with log.open("a") as f:
                rec = {
                    "step": making["step"],
                    "uids": [x["uid"] for x in items],
                    "epochs": epochs,
                }
                f.write(json.dumps(rec) + "\n")
            return collate(items, epochs)

        trainer.phases = [Phase(data, steps, "phase", spy)]
        if stop is not None:
            stop_after(trainer, stop)
        with contextlib.suppress(Stop):  # a simulated crash
            trainer.fit()
    finally:
        D.shutdown(info)
