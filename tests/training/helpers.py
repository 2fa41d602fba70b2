"""A tiny in-memory pre-training setup (real BertForPreTraining, synthetic statically masked data)."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.config import BertConfig
from bertkit.model import BertForPreTraining
from bertkit.training.distributed import DistInfo
from bertkit.training.faults import Faults
from bertkit.training.loop import Phase, TrainConfig, Trainer
from bertkit.training.optim import OptimizerConfig, build_optimizer
from bertkit.training.schedule import ScheduleConfig

VOCAB = 40


def make_examples(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Statically masked instances: ids in [5, VOCAB), ~15% of positions masked with id 4."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        t = int(rng.integers(8, 17))
        ids = rng.integers(5, VOCAB, size=t)
        ids[0], ids[-1] = 2, 3
        pos = np.sort(rng.choice(np.arange(1, t - 1), size=max(1, round(0.15 * t)), replace=False))
        labels = ids[pos].copy()
        ids[pos] = 4
        types = np.zeros(t, dtype=np.int64)
        types[t // 2 :] = 1
        out.append(
            {
                "input_ids": ids,
                "token_type_ids": types,
                "masked_positions": pos,
                "masked_labels": labels,
                "next_sentence_label": int(rng.integers(0, 2)),
            }
        )
    return out


def collate(items: list[dict[str, Any]], epochs: list[int]) -> dict[str, torch.Tensor]:
    b, t = len(items), max(len(x["input_ids"]) for x in items)
    batch = {
        k: torch.zeros(b, t, dtype=torch.long)
        for k in ("input_ids", "token_type_ids", "attention_mask")
    }
    batch["labels"] = torch.full((b, t), -100, dtype=torch.long)
    batch["next_sentence_label"] = torch.tensor([x["next_sentence_label"] for x in items])
    for r, x in enumerate(items):
        n = len(x["input_ids"])
        batch["input_ids"][r, :n] = torch.from_numpy(x["input_ids"])
        batch["token_type_ids"][r, :n] = torch.from_numpy(x["token_type_ids"])
        batch["attention_mask"][r, :n] = 1
        batch["labels"][r, torch.from_numpy(x["masked_positions"])] = torch.from_numpy(
            x["masked_labels"]
        )
    return batch


def tiny_config(dropout: float = 0.1) -> BertConfig:
    return BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )


def make_trainer(
    run_dir: Path,
    *,
    steps: int = 8,
    dropout: float = 0.1,
    n: int = 40,
    info: DistInfo | None = None,
    lr: float = 1e-3,
    layerwise_lr_decay: float = 1.0,
    **train_kw: Any,
) -> Trainer:
    """A fresh trainer; model init is seeded so every call builds the same starting point."""
    torch.manual_seed(1234)
    model = BertForPreTraining(tiny_config(dropout))
    opt = build_optimizer(model, OptimizerConfig(lr=lr, layerwise_lr_decay=layerwise_lr_decay))
    fault_names = {f.name for f in dataclasses.fields(Faults)}
    faults = Faults(**{k: train_kw.pop(k) for k in list(train_kw) if k in fault_names})
    cfg = TrainConfig(
        **{
            "batch_size": 8,
            "log_every": 1,
            "save_every": 3,
            "seed": 7,
            "show_progress": False,
            "peak_flops": 1e9,
            "precision": "fp32",  # not auto: a spawned DDP worker would pick bf16 where faster
            **train_kw,
        }
    )
    data = make_examples(n)
    return Trainer(
        model,
        opt,
        ScheduleConfig(steps, 2),
        [Phase(data, steps)],
        collate,
        cfg,
        run_dir,
        info=info,
        eval_dataset=make_examples(16, seed=1),
        log=lambda m: None,
        faults=faults,
    )


def losses(run_dir: Path) -> list[tuple[int, float]]:
    import json

    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [(r["step"], r["loss"]) for r in map(json.loads, lines) if r["type"] == "train"]


def free_port() -> int:
    """A free TCP port for a test's server, outside the kernel's ephemeral range.

    A port the kernel handed out (bind to 0) and was released can be handed to another process's
    outgoing connection before the test's server binds it. Ports below the ephemeral range are
    never picked by the kernel, so the only clash left is two tests drawing the same random port
    (checked by binding it).
    """
    import random
    import socket

    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()  # not the seeded global RNG: parallel tests must not draw alike
    for _ in range(100):
        port = rng.randrange(20000, max(20001, low))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # fall back to the kernel's choice
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stop(Exception):
    """Raised by a test to end training abruptly after a given step (a simulated crash)."""


def stop_after(trainer: Trainer, last_step: int) -> None:
    """Make ``trainer`` raise Stop right after update ``last_step + 1`` (like a kill mid-run)."""
    original = trainer._train_step

    def step(model):
        out = original(model)
        if trainer.step > last_step:
            raise Stop
        return out

    trainer._train_step = step


def join_gloo(rank: int, world: int, port: int, *, threads: int | None = 1, **env: str) -> DistInfo:
    """This process as rank ``rank`` of a ``world``-process gloo group on 127.0.0.1:``port``
    (``threads`` torch threads, None: left as they are; ``env``: more variables set first), as
    torchrun would start it."""
    import os

    from bertkit.training import distributed as D

    if threads is not None:
        torch.set_num_threads(threads)
    os.environ.update(
        env,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )
    return D.init_from_env("cpu")


def ddp_worker(
    rank: int, world: int, port: int, run_dir: str, steps: int, kw: dict, stop: int | None = None
) -> None:
    """One rank of a gloo job training the tiny setup (target of torch.multiprocessing.spawn).

    With ``stop``, every rank stops after that step (no final save), as if the job was killed.
    """

    from bertkit.training import distributed as D

    info = join_gloo(rank, world, port)
    try:
        trainer = make_trainer(Path(run_dir), steps=steps, info=info, **kw)
        if stop is not None:
            stop_after(trainer, stop)
            with contextlib.suppress(Stop):
                trainer.fit()
        else:
            trainer.fit()
            if info.is_main:
                from safetensors.torch import save_file

                save_file(
                    {k: v.contiguous() for k, v in trainer.core.state_dict().items()},
                    str(Path(run_dir) / "final.safetensors"),
                )
    finally:
        D.shutdown(info)
    D.exit_process(0)  # as the bertkit program's ranks do: no interpreter finalization


def decisions_worker(rank: int, world: int, port: int, out: str, env: list[dict]) -> None:
    """Join a gloo group with ``env[rank]`` as this rank's only kernel settings and write the
    decisions it runs to ``out/rank<r>.json`` (target of torch.multiprocessing.spawn)."""
    import json
    import os

    from bertkit import hardware
    from bertkit.training import distributed as D

    for name in (*hardware.ENV.values(), "BERTKIT_ONEDNN"):
        os.environ.pop(name, None)
    info = join_gloo(rank, world, port, threads=None, **env[rank])
    try:
        made = {n: [d.choice, d.source] for n, d in hardware.decisions().items()}
        (Path(out) / f"rank{rank}.json").write_text(json.dumps(made))
    finally:
        D.shutdown(info)
    D.exit_process(0)


def prepare_tiny_corpus(
    root: Path,
    *,
    docs: int = 40,
    max_seq_length: int = 32,
    dynamic: bool = False,
    holdout: float = 0.1,
) -> Path:
    """A synthetic corpus and vocabulary prepared with the real data pipeline; returns the data dir."""
    import random

    from bertkit.data.corpus import CorpusOptions
    from bertkit.data.prepare import PrepareSettings, prepare_pretraining
    from bertkit.data.pretraining import InstanceConfig

    rng = random.Random(0)
    words = [f"w{i}" for i in range(60)] + ["the", "a", "is", "of", "and"]
    lines = []
    for _ in range(docs):
        for _ in range(8):
            lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + " .")
        lines.append("")
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.txt").write_text("\n".join(lines) + "\n")
    (root / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *words]) + "\n"
    )
    settings = PrepareSettings(
        instance=InstanceConfig(max_seq_length=max_seq_length, dupe_factor=2),
        corpus=CorpusOptions(format="bert"),
        holdout_fraction=holdout,
        dynamic_masking=dynamic,
    )
    prepare_pretraining(
        [root / "corpus.txt"],
        root / "vocab.txt",
        root / "data",
        settings,
        num_workers=1,
        show_progress=False,
    )
    return root / "data"


def grad_cache_worker(
    rank: int, world: int, port: int, out: str, size: int | None, ddp_reduces: bool = False
) -> None:
    """One rank of a gloo job running one update of a tiny bi-encoder under DDP (target of
    torch.multiprocessing.spawn): two micro-batches of rank-specific rows, ``size`` rows per
    GradCache pass (None: one pass). Saves the gradients the optimizer saw to
    ``out/rank<r>.pt``. ``ddp_reduces`` hides the model's multi-pass backward from the update
    step (negative control: DDP's hooks reduce, as before the update step reduced itself)."""

    from bertkit.model.contrastive import BiEncoder
    from bertkit.training import distributed as D
    from bertkit.training import update as U
    from bertkit.training.objectives import TaskLoss
    from bertkit.training.update import UpdateStep

    if ddp_reduces:
        U.multi_pass_backward = lambda model: False  # type: ignore[assignment]

    info = join_gloo(rank, world, port)
    try:
        from support.tiny_encoder import tiny_encoder

        core = BiEncoder(tiny_encoder(vocab_size=VOCAB), mini_batch_size=size)  # seeded: one model
        model = torch.nn.parallel.DistributedDataParallel(core)
        opt = torch.optim.SGD(core.parameters(), lr=0.1)
        seen: dict[str, torch.Tensor] = {}
        opt.step = lambda *a, **k: seen.update(  # type: ignore[method-assign]
            {n: p.grad.clone() for n, p in core.named_parameters() if p.grad is not None}
        )
        step = UpdateStep(opt, TaskLoss(), list(core.parameters()), "fp32", "cpu", 1e9, info)
        batches = []
        for j in range(2):  # rows: 4 queries then their 4 positives, rank and micro-batch's own
            g = torch.Generator().manual_seed(100 * rank + j)
            mask = (torch.arange(12)[None, :] < torch.randint(3, 13, (8, 1), generator=g)).long()
            ids = torch.randint(5, VOCAB, (8, 12), generator=g) * mask
            batches.append({"input_ids": ids, "attention_mask": mask, "labels": torch.arange(4)})
        stats = step(model, batches)
        assert stats is not None
        torch.save({"loss": stats.loss, "grads": seen}, str(Path(out) / f"rank{rank}.pt"))
    finally:
        D.shutdown(info)
    D.exit_process(0)
