"""Extractive question answering (squad): sliding windows, n-best span search, v2.0 null threshold.

Head: ``BertForQuestionAnswering``; metric: SQuAD F1 (and exact match), as the official script
computes them. Window settings are a :class:`~bertkit.tasks.squad_features.SquadFeatureConfig`
(the shared :class:`~bertkit.tasks.windows.WindowConfig` plus the question's length), span search
settings a :class:`~bertkit.tasks.squad_post.SquadPostConfig`: their defaults are the only
definition of the paper's values (length 384, stride 128, query 64, n-best 20, answer 30).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tasks.squad import load_gold, read_squad
from bertkit.evaluation.squad import squad_scores
from bertkit.io import format_suffix
from bertkit.tasks import features as F
from bertkit.tasks.base import Scored, TaskAdapter, unscored
from bertkit.tasks.squad_features import (
    SQUAD_MAX_SEQ_LENGTH,
    SquadFeatureConfig,
    convert_squad_examples,
)
from bertkit.tasks.squad_post import (
    SquadPostConfig,
    final_answers,
    find_best_null_threshold,
    null_answers,
    postprocess_squad,
)
from bertkit.tokenizer.protocol import Tokenizer


@dataclass
class SquadAdapter(TaskAdapter):
    """SQuAD v1.1/v2.0.

    ``null_threshold`` is tuned on dev by :meth:`fit_dev` (the value that maximises dev F1) and
    saved with the model; :meth:`score` uses the saved value (evaluate, predict).
    """

    max_seq_length: int = SQUAD_MAX_SEQ_LENGTH
    version_2: bool = False
    windows: SquadFeatureConfig = field(default_factory=SquadFeatureConfig)
    search: SquadPostConfig = field(default_factory=SquadPostConfig)
    null_threshold: float = 0.0

    head_class = "BertForQuestionAnswering"
    main_metric = "f1"
    loss_over_padding = True  # the head's span softmax, as transformers' and google's

    def __post_init__(self) -> None:
        # a dict from bertkit_task.json; the default stride made explicit, so the folder records it
        self.windows = SquadFeatureConfig.of(self.windows).with_stride(self.max_seq_length)
        if isinstance(self.search, dict):
            self.search = SquadPostConfig(**self.search)
        self.windows.check_fits(self.max_seq_length)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SquadAdapter:
        """Also reads the flat keys of models saved before the settings were grouped (the
        older ``windows`` layouts are :meth:`SquadFeatureConfig.of`'s)."""
        s = dict(state)
        flat_windows = {k: s.pop(k) for k in ("doc_stride", "max_query_length") if k in s}
        flat_search = {k: s.pop(k) for k in ("n_best_size", "max_answer_length") if k in s}
        if flat_windows:
            s["windows"] = {**s.get("windows", {}), **flat_windows}
        if flat_search:
            s["search"] = {**s.get("search", {}), **flat_search}
        return cls(**s)

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        return read_squad(path, version_2=self.version_2)

    def count_examples(self, path: str | Path) -> int | None:
        """Questions in a JSON-lines file (one a line); None for SQuAD's JSON, whose lines are
        not questions (a bar without a total, not a wrong one)."""
        return super().count_examples(path) if format_suffix(path) == ".jsonl" else None

    def missing_label(self, example: Any) -> str | None:
        """A question read without answers (a JSON-lines file's, to predict) is neither trained
        on nor scored; an unanswerable one (SQuAD v2.0) is labelled."""
        return "answers" if not example.answers and not example.is_impossible else None

    def encode(self, tokenizer: Tokenizer, examples: Sequence[Any], training: bool) -> list[Any]:
        return convert_squad_examples(
            tokenizer, examples, self.max_seq_length, self.windows, is_training=training
        )

    def collate(
        self, features: Sequence[Any], pad_id: int, training: bool
    ) -> dict[str, np.ndarray]:
        batch = F.pad_batch(
            [F.EncodedInput(f.input_ids, f.token_type_ids, f.attention_mask) for f in features],
            pad_id,
        )
        if training:
            batch["start_positions"] = np.asarray(
                [f.start_position for f in features], dtype=np.int64
            )
            batch["end_positions"] = np.asarray([f.end_position for f in features], dtype=np.int64)
        return batch

    def outputs(self, out: Any, batch: dict[str, np.ndarray]) -> list[Any]:
        s, e = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
        lengths = batch["attention_mask"].sum(1)
        return [(a[:n], b[:n]) for a, b, n in zip(s, e, lengths)]

    def _search(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> dict[str, Any]:
        starts, ends = [r[0] for r in rows], [r[1] for r in rows]
        return postprocess_squad(examples, features, starts, ends, self.search)

    def _scored(self, examples: Sequence[Any], found: dict[str, Any], threshold: float) -> Scored:
        answers = final_answers(found, self.version_2, threshold)
        preds = [_prediction(q, a, found[q]) for q, a in answers.items()]
        if not all(e.answers or e.is_impossible for e in examples):
            return unscored(preds)
        version = "2.0" if self.version_2 else "1.1"
        null = null_answers(found, self.version_2, threshold)
        scores = squad_scores(load_gold(list(examples)), answers, version, no_answer=null)
        if self.version_2:
            scores["null_threshold"] = threshold
        return Scored(scores, float(scores["f1"]), preds)

    def score(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        return self._scored(examples, self._search(examples, features, rows), self.null_threshold)

    def fit_dev(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        """v2.0: tune the null threshold on these examples, then score with it.

        The tuned value is returned in ``metrics["null_threshold"]``; :meth:`with_tuned` makes
        the copy saved with the best checkpoint (this adapter is left unchanged).
        """
        found = self._search(examples, features, rows)
        if not self.version_2:
            return self._scored(examples, found, self.null_threshold)
        best = find_best_null_threshold(found, load_gold(list(examples)))
        return self._scored(examples, found, best.threshold)

    def with_tuned(self, metrics: dict[str, Any]) -> SquadAdapter:
        return replace(
            self, null_threshold=float(metrics.get("null_threshold", self.null_threshold))
        )


def _prediction(qas_id: str, answer: str, found: Any) -> dict[str, Any]:
    """One answer with its character span in the context and its probability among the n-best
    (``start``/``end``/``probability`` are None for the empty answer)."""
    best = next((c for c in found.nbest if answer and c.text == answer), None)
    return {
        "id": qas_id,
        "answer": answer,
        "start": None if best is None else best.start_char,
        "end": None if best is None else best.end_char,
        "probability": None if best is None else round(float(best.probability), 6),
        "null_score_diff": _finite(found.null_score_diff),
    }


def _finite(x: float) -> float | None:
    return None if not np.isfinite(x) else float(x)
