"""Reference fine-tuning with Hugging Face transformers models, for ``finetune_quality``.

``transformers.Trainer`` needs ``accelerate``, which is not installed here, so this module is a plain
PyTorch loop that does what the Trainer does with its defaults:

* ``set_seed(seed)`` before the model is built (head initialisation), a ``RandomSampler``-like
  permutation per epoch from a generator seeded with ``seed``;
* ``torch.optim.AdamW`` (betas 0.9/0.999, eps from the arguments: the Trainer default is 1e-8),
  weight decay on every parameter except biases and LayerNorm weights;
* ``get_linear_schedule_with_warmup`` (warmup steps = ceil(warmup_ratio * total));
* gradient clipping at ``max_grad_norm`` 1.0; dynamic padding (``DataCollatorWithPadding``);
* evaluation once, after the last epoch (the Trainer's default: no best-checkpoint selection).

Task logic follows the transformers examples: ``run_glue`` (truncation to max_seq_length),
``run_ner`` (label on the first sub-token, others -100, truncation; metric: seqeval), ``run_qa``
(``truncation="only_second"`` windows with ``stride``, offsets, the [CLS] fallback for answers
outside a window, n-best span search without the max-context rule).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch


@dataclass(frozen=True)
class RefHParams:
    lr: float = 2e-5
    epochs: int = 3
    batch_size: int = 32
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    adam_eps: float = 1e-8
    max_grad_norm: float = 1.0
    max_seq_length: int = 128
    max_steps: int | None = None
    eval_batch_size: int = 64
    group_by_length: bool = False
    """The Trainer's ``group_by_length``: batches from its ``LengthGroupedSampler``."""


def _optimizer(model: torch.nn.Module, hp: RefHParams) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": hp.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=hp.lr, betas=(0.9, 0.999), eps=hp.adam_eps)


def train_loop(
    model: torch.nn.Module, features: Sequence[dict[str, Any]], collate, hp: RefHParams, seed: int
) -> int:
    """Train ``model`` on ``features`` (dicts) with Trainer-default mechanics; returns steps."""
    from transformers import get_linear_schedule_with_warmup

    steps_per_epoch = math.ceil(len(features) / hp.batch_size)
    total = (
        steps_per_epoch * hp.epochs
        if hp.max_steps is None
        else min(hp.max_steps, steps_per_epoch * hp.epochs)
    )
    opt = _optimizer(model, hp)
    sched = get_linear_schedule_with_warmup(opt, math.ceil(hp.warmup_ratio * total), total)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    step = 0
    lengths = [len(f["input_ids"]) for f in features] if hp.group_by_length else None
    for _ in range(hp.epochs):
        if lengths is not None:
            from transformers.trainer_pt_utils import LengthGroupedSampler

            order = list(LengthGroupedSampler(hp.batch_size, lengths=lengths, generator=gen))
        else:
            order = torch.randperm(len(features), generator=gen).tolist()
        for k in range(0, len(order), hp.batch_size):
            if step >= total:
                return step
            batch = collate([features[i] for i in order[k : k + hp.batch_size]])
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), hp.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
    return step


def _pad(tok: Any, feats: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, torch.Tensor]:
    return tok.pad([{k: f[k] for k in keys} for f in feats], return_tensors="pt")


@torch.no_grad()
def _predict(
    model: torch.nn.Module, feats: Sequence[dict[str, Any]], collate, bs: int
) -> list[Any]:
    model.eval()
    return [model(**collate(feats[i : i + bs])) for i in range(0, len(feats), bs)]


# ---- GLUE-style classification -------------------------------------------------------------------


def classification(
    model_dir: str,
    train: Sequence[Any],
    dev: Sequence[Any],
    num_labels: int,
    metric: str,
    hp: RefHParams,
    seed: int,
) -> dict[str, float]:
    """run_glue-style: ``train``/``dev`` are bertkit ClassificationExamples (same data both sides)."""
    from transformers import BertForSequenceClassification, BertTokenizerFast, set_seed

    from bertkit.evaluation.classification import glue_metrics

    tok = BertTokenizerFast.from_pretrained(model_dir)

    def encode(examples: Sequence[Any]) -> list[dict[str, Any]]:
        a = [e.text_a for e in examples]
        b = [e.text_b for e in examples] if examples[0].text_b is not None else None
        enc = tok(a, b, truncation=True, max_length=hp.max_seq_length)
        return [{**{k: enc[k][i] for k in enc}, "labels": e.label} for i, e in enumerate(examples)]

    keys = ("input_ids", "token_type_ids", "attention_mask")

    def collate(feats: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = _pad(tok, feats, keys)
        batch["labels"] = torch.tensor([f["labels"] for f in feats])
        return batch

    set_seed(seed)
    model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=num_labels)
    train_loop(model, encode(train), collate, hp, seed)
    dev_feats = encode(dev)
    outs = _predict(model, dev_feats, lambda f: _pad(tok, f, keys), hp.eval_batch_size)
    logits = torch.cat([o.logits for o in outs]).numpy()
    preds = logits[:, 0] if num_labels == 1 else logits.argmax(-1)
    out = glue_metrics(metric, np.asarray([e.label for e in dev]), preds)
    if num_labels > 1:
        out["predicted_positive"] = int((preds == 1).sum())
    return out


# ---- token classification (run_ner) -------------------------------------------------------------


def token_classification(
    model_dir: str,
    train: Sequence[Any],
    evals: dict[str, Sequence[Any]],
    labels: list[str],
    hp: RefHParams,
    seed: int,
) -> dict[str, dict[str, float]]:
    """run_ner-style with ``label_all_tokens=False``; sentences are bertkit TaggedSentences."""
    from seqeval.metrics import f1_score, precision_score, recall_score
    from transformers import BertForTokenClassification, BertTokenizerFast, set_seed

    tok = BertTokenizerFast.from_pretrained(model_dir)
    index = {t: i for i, t in enumerate(labels)}

    def encode(sents: Sequence[Any]) -> list[dict[str, Any]]:
        enc = tok(
            [list(s.tokens) for s in sents],
            is_split_into_words=True,
            truncation=True,
            max_length=hp.max_seq_length,
        )
        out = []
        for i, s in enumerate(sents):
            prev, lab = None, []
            for w in enc.word_ids(i):
                lab.append(-100 if w is None or w == prev else index.get(s.tags[w], 0))
                prev = w
            out.append({**{k: enc[k][i] for k in enc}, "labels": lab})
        return out

    keys = ("input_ids", "token_type_ids", "attention_mask")

    def collate(feats: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = _pad(tok, feats, keys)
        t = batch["input_ids"].shape[1]
        batch["labels"] = torch.tensor(
            [f["labels"] + [-100] * (t - len(f["labels"])) for f in feats]
        )
        return batch

    set_seed(seed)
    model = BertForTokenClassification.from_pretrained(model_dir, num_labels=len(labels))
    train_loop(model, encode(train), collate, hp, seed)
    results = {}
    for name, sents in evals.items():
        feats = encode(sents)
        outs = _predict(model, feats, collate, hp.eval_batch_size)
        gold_tags, pred_tags = [], []
        k = 0
        for o in outs:
            ids = o.logits.argmax(-1).numpy()
            for row in ids:
                lab = feats[k]["labels"]
                # as run_ner: keep positions whose label is not -100 (truncated words are dropped)
                gold_tags.append([labels[y] for y in lab if y != -100])
                pred_tags.append([labels[p] for p, y in zip(row, lab) if y != -100])
                k += 1
        results[name] = {
            "precision": precision_score(gold_tags, pred_tags),
            "recall": recall_score(gold_tags, pred_tags),
            "f1": f1_score(gold_tags, pred_tags),
        }
    return results


# ---- extractive QA (run_qa) ---------------------------------------------------------------------


def question_answering(
    model_dir: str,
    train: Sequence[Any],
    dev: Sequence[Any],
    hp: RefHParams,
    seed: int,
    doc_stride: int = 128,
    n_best: int = 20,
    max_answer_length: int = 30,
) -> dict[str, float]:
    """run_qa-style on bertkit SquadExamples (v1.1); EM/F1 with the official normalisation."""
    from transformers import BertForQuestionAnswering, BertTokenizerFast, set_seed

    from bertkit.evaluation.squad import squad_scores

    tok = BertTokenizerFast.from_pretrained(model_dir)

    def windows(examples: Sequence[Any]) -> Any:
        return tok(
            [e.question.lstrip() for e in examples],
            [e.context for e in examples],
            truncation="only_second",
            max_length=hp.max_seq_length,
            stride=doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )

    enc = windows(train)
    feats = []
    for i in range(len(enc["input_ids"])):
        ex = train[enc["overflow_to_sample_mapping"][i]]
        seq, offs = enc.sequence_ids(i), enc["offset_mapping"][i]
        a, b = ex.answers[0].start, ex.answers[0].end
        ctx = [j for j, s in enumerate(seq) if s == 1]
        s_pos = e_pos = 0
        if offs[ctx[0]][0] <= a and offs[ctx[-1]][1] >= b:
            s_pos = next(j for j in reversed(ctx) if offs[j][0] <= a)
            e_pos = next(j for j in ctx if offs[j][1] >= b)
        feats.append(
            {
                "input_ids": enc["input_ids"][i],
                "token_type_ids": enc["token_type_ids"][i],
                "attention_mask": enc["attention_mask"][i],
                "start_positions": s_pos,
                "end_positions": e_pos,
            }
        )
    keys = ("input_ids", "token_type_ids", "attention_mask")

    def collate(fs: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = _pad(tok, fs, keys)
        batch["start_positions"] = torch.tensor([f["start_positions"] for f in fs])
        batch["end_positions"] = torch.tensor([f["end_positions"] for f in fs])
        return batch

    set_seed(seed)
    model = BertForQuestionAnswering.from_pretrained(model_dir)
    train_loop(model, feats, collate, hp, seed)
    enc = windows(dev)
    dev_feats = [{k: enc[k][i] for k in keys} for i in range(len(enc["input_ids"]))]
    outs = _predict(model, dev_feats, lambda f: _pad(tok, f, keys), hp.eval_batch_size)
    starts = [r for o in outs for r in o.start_logits.numpy()]
    ends = [r for o in outs for r in o.end_logits.numpy()]
    best: dict[int, tuple[float, str]] = {}
    for i, (s_log, e_log) in enumerate(zip(starts, ends)):
        ex_i = enc["overflow_to_sample_mapping"][i]
        ctx = dev[ex_i].context
        seq, offs = enc.sequence_ids(i), enc["offset_mapping"][i]
        n = len(seq)
        for s in np.argsort(s_log[:n])[::-1][:n_best]:
            for e in np.argsort(e_log[:n])[::-1][:n_best]:
                if seq[s] != 1 or seq[e] != 1 or e < s or e - s + 1 > max_answer_length:
                    continue
                score = float(s_log[s] + e_log[e])
                if ex_i not in best or score > best[ex_i][0]:
                    best[ex_i] = (score, ctx[offs[s][0] : offs[e][1]])
    answers = {ex.qas_id: best.get(i, (0.0, ""))[1] for i, ex in enumerate(dev)}
    gold = {ex.qas_id: [a.text for a in ex.answers] for ex in dev}
    return squad_scores(gold, answers, "1.1")
