"""Fine-tuned models as callables: load a ``bertkit finetune`` folder, predict on text or files.

:class:`TaskModel` is the folder (task adapter from ``bertkit_task.json``, tokenizer, model with
its head) plus how to run it (device, precision, batch size). It reads files with the task's
readers (``predict_file``, ``score_file``) or takes Python objects; the family classes give
text-level calls::

    clf = Classifier.load("out/sst2");   clf(["a gripping film", "dull"])
    qa = QuestionAnswerer.load("out/squad");   qa("Who wrote it?", "It was written by Ann.")
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from bertkit import hub
from bertkit import precision as P
from bertkit.data.tasks.conll import TaggedSentence
from bertkit.data.tasks.glue import ClassificationExample
from bertkit.data.tasks.squad import SquadExample
from bertkit.data.tasks.swag import MultipleChoiceExample
from bertkit.errors import CheckpointError, ConfigError
from bertkit.evaluation.chunks import tag_spans
from bertkit.inference.loading import load_for_inference
from bertkit.inference.runner import predict_rows
from bertkit.interop.sentence_folder import MODULES
from bertkit.tasks import Scored, TaskAdapter, load_adapter
from bertkit.tasks.base import unscored
from bertkit.tasks.saved import has_task
from bertkit.tasks.squad_features import SquadFeatureConfig
from bertkit.tasks.windows import WindowConfig, aggregate
from bertkit.tokenizer.protocol import Tokenizer

BATCH_SIZE = 64
"""Examples per forward pass, batched by length (the default of ``load`` and of the CLI)."""


@dataclass
class Prepared:
    """Inputs ready to run (:meth:`TaskModel.prepare`): the examples, the windows (features) the
    model reads, and each input's whole length in tokens, specials included, taken from that one
    tokenization (a server checks its length limit on it before running)."""

    examples: list[Any]
    features: list[Any]
    lengths: list[int]


def input_lengths(features: Sequence[Any], inputs: int) -> list[int]:
    """Each input's whole length from its windows' ``input_length`` (a multiple-choice input:
    its longest choice)."""
    out = [0] * inputs
    for f in features:
        for window in f if isinstance(f, list) else (f,):
            i = window.example_index
            out[i] = max(out[i], window.input_length)
    return out


@dataclass
class TaskModel:
    """A fine-tuned model ready to predict. ``precision`` is already concrete (never ``auto``)."""

    adapter: TaskAdapter
    tokenizer: Tokenizer
    model: torch.nn.Module
    precision: str = "fp32"
    batch_size: int = BATCH_SIZE
    show_progress: bool | None = None
    source: Path | None = None
    """The folder :meth:`load` read (the model fingerprint of :meth:`predict_to`'s manifest)."""

    families: ClassVar[tuple[str, ...]] = ()
    """The task families this class serves (empty: any)."""

    @classmethod
    def load(
        cls,
        directory: str | Path,
        *,
        device: str | None = None,
        precision: str = P.DEFAULT,
        batch_size: int = BATCH_SIZE,
        allow_pickle: bool = False,
        split_special_tokens: bool = False,
        model: torch.nn.Module | None = None,
    ) -> TaskModel:
        """Load a folder written by ``bertkit finetune`` onto ``device`` (None: CUDA if present).

        ``model``: a model for the folder's head that is already loaded (e.g. an exported ONNX
        file, :class:`bertkit.export.OnnxModel`), used instead of the folder's weights.
        ``directory``: a folder or a Hub id (:func:`bertkit.hub.resolve`)."""
        directory = hub.resolve(directory, allow_pickle=allow_pickle)
        if not has_task(directory) and (Path(directory) / MODULES).is_file():
            # `finetune embeddings` writes one too: "written by finetune?" would mislead
            raise CheckpointError(
                f"{directory}: an embedding model ({MODULES}, no task head): it embeds "
                "(`bertkit embed`, `evaluate` on sentence pairs or a BEIR folder, `mine --model`)"
                "; it does not predict or rerank"
            )
        adapter = load_adapter(directory)
        wanted = cls.families
        if wanted and adapter.family not in wanted:
            raise CheckpointError(
                f"{directory}: a {adapter.family} model, not one for {cls.__name__} "
                f"(expected a model fine-tuned with `bertkit finetune {'/'.join(wanted)}`)"
            )
        loaded = load_for_inference(
            directory,
            adapter.head_class,
            device=device,
            precision=precision,
            allow_pickle=allow_pickle,
            split_special_tokens=split_special_tokens,
            model=model,
        )
        return cls(
            adapter,
            loaded.tokenizer,
            loaded.model,
            loaded.placement.precision,
            batch_size,
            source=loaded.directory,
        )

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def prepare(self, examples: Sequence[Any], **caps: int | None) -> Prepared:
        """``examples`` encoded into the windows the model runs (each text tokenized once),
        with each input's whole length: check limits on it, then :meth:`run` it. ``caps``: the
        adapter's own bounds on what is read of an input, for the families that have them
        (classification's ``text_pair_max_tokens`` and ``max_windows``,
        :func:`~bertkit.tasks.features.encode_classification`; the lengths are then those of the
        inputs as read)."""
        features = self.adapter.encode(self.tokenizer, examples, training=False, **caps)
        return Prepared(list(examples), features, input_lengths(features, len(examples)))

    def run(self, examples: Sequence[Any] | Prepared) -> Scored:
        """Predict and decode ``examples`` (or what :meth:`prepare` made of them), scored when
        they carry gold labels."""
        p = examples if isinstance(examples, Prepared) else self.prepare(examples)
        if not p.examples:  # an empty file (or a header alone): no predictions, nothing scored
            scored = unscored([])
            scored.windows = self.adapter.window_counts(p.examples, p.features)
            return scored
        rows = predict_rows(
            self.model,
            self.adapter,
            p.features,
            pad_id=self.tokenizer.pad_token_id or 0,
            batch_size=self.batch_size,
            precision=self.precision,
            show_progress=self.show_progress,
        )
        scored = self.adapter.score(p.examples, p.features, rows)
        scored.windows = self.adapter.window_counts(p.examples, p.features)
        return scored

    def with_windows(self, **changes: Any) -> TaskModel:
        """This model reading long inputs with other window settings (``truncate``,
        ``doc_stride``, ``window_pooling``; None values keep the saved ones).

        A SQuAD model honours ``doc_stride`` (its context windows' overlap) and has no use for
        the others (it reads every window and keeps the best span); a multiple-choice model
        truncates every (context, ending) pair and honours none. A setting a model cannot honour
        is a ConfigError naming it, never silently dropped."""
        changes = {k: v for k, v in changes.items() if v is not None}
        if not changes:
            return self
        windows = getattr(self.adapter, "windows", None)
        if isinstance(windows, WindowConfig):
            return replace(self, adapter=replace(self.adapter, windows=replace(windows, **changes)))
        family = self.adapter.family
        kept = {"doc_stride"} if isinstance(windows, SquadFeatureConfig) else set()
        refused = sorted(set(changes) - kept)
        if refused:
            flags = ", ".join("--" + k.replace("_", "-") for k in refused)
            why = (
                "reads every window of a long context and keeps the best span"
                if kept
                else "truncates each (context, ending) pair"
            )
            applies = "only --doc-stride applies" if kept else "no window flag applies"
            raise ConfigError(f"{flags}: a {family} model {why}; {applies}")
        squad = replace(windows, window=replace(windows.window, **changes))  # type: ignore[union-attr]
        return replace(self, adapter=replace(self.adapter, windows=squad))

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        """Examples of ``path`` in the task's format, or plain text fields (classification)."""
        return self.adapter.read(path, split)

    def iter_read(self, path: str | Path, split: str = "dev") -> Iterator[Any]:
        """:meth:`read` one example at a time, each parsed as it is pulled, where the task's
        format allows (classification, tagging and multiple-choice files); a GLUE folder and
        SQuAD JSON are read whole and then iterated."""
        return self.adapter.iter_read(path, split)

    def predict_file(self, path: str | Path, split: str = "test") -> Scored:
        return self.run(self.read(path, split))

    def predict_to(self, examples: Iterable[Any], folder: str | Path, **kwargs: Any):
        """JSONL shards + manifest in ``folder``, resumable:
        :func:`bertkit.inference.prediction_corpus.predict_to`."""
        from bertkit.inference import prediction_corpus

        return prediction_corpus.predict_to(self, examples, folder, **kwargs)

    def score_file(self, path: str | Path, split: str = "dev") -> Scored:
        """Read ``path`` with the saved task's reader, predict and score."""
        return self.run(self.read(path, split))


@dataclass
class Classifier(TaskModel):
    """Single texts or pairs -> label, probabilities and logits (or a score, for regression)."""

    families: ClassVar[tuple[str, ...]] = ("glue", "classify")

    def __call__(
        self, texts: str | tuple[str, str] | Sequence[str | tuple[str, str]]
    ) -> list[dict]:
        items = [texts] if isinstance(texts, (str, tuple)) else list(texts)
        return self.outputs(self.run(self.examples_of(items)))

    @staticmethod
    def examples_of(items: Sequence[str | tuple[str, str]]) -> list[ClassificationExample]:
        """Texts and (text, text_pair) tuples as examples."""
        return [
            ClassificationExample(str(i), *(t if isinstance(t, tuple) else (t, None)), None)
            for i, t in enumerate(items)
        ]

    @staticmethod
    def outputs(scored: Scored) -> list[dict]:
        """Per input: ``label``, ``probabilities`` and ``logits`` (regression: ``score``)."""
        return [{k: v for k, v in p.items() if k != "guid"} for p in scored.predictions]

    # The steps of a call, apart, for callers that batch many calls' windows together (the
    # server's /rerank merges concurrent requests): prepare, run the rows, combine.

    def feature_rows(self, features: Sequence[Any]) -> np.ndarray:
        """The model's logits (F, num_labels) for the features of :meth:`prepare`, in one pass."""
        return np.stack(
            predict_rows(
                self.model,
                self.adapter,
                features,
                pad_id=self.tokenizer.pad_token_id or 0,
                batch_size=max(1, len(features)),
                precision=self.precision,
            )
        )

    def combine_rows(self, rows: np.ndarray, features: Sequence[Any], inputs: int) -> np.ndarray:
        """Each input's logits (N, num_labels) from its windows' rows (the saved window pooling)."""
        return aggregate(
            rows,
            [f.example_index for f in features],
            [len(f.input_ids) for f in features],
            inputs,
            self.adapter.windows.window_pooling,
        )  # type: ignore[attr-defined]


_WORD = re.compile(r"\S+")


@dataclass
class Tagger(TaskModel):
    """Texts (split on whitespace) or word lists -> one tag per word, and the entities.

    An entity is ``{"entity", "start", "end", "text"}``: the character span of its words in the
    text (a word list is read as its words joined by one space)."""

    families: ClassVar[tuple[str, ...]] = ("ner", "tag")

    def __call__(self, texts: str | Sequence[str] | Sequence[Sequence[str]]) -> list[dict]:
        items = [texts] if isinstance(texts, str) else list(texts)
        return self.outputs(items, self.run(self.examples_of(items)))

    @staticmethod
    def examples_of(items: Sequence[str | Sequence[str]]) -> list[TaggedSentence]:
        """Each text (or word list) as its own document (a document-context model reads it
        alone)."""
        words = [tuple(_WORD.findall(t)) if isinstance(t, str) else tuple(t) for t in items]
        return [TaggedSentence(w, (), 0, i) for i, w in enumerate(words)]

    @staticmethod
    def outputs(items: Sequence[str | Sequence[str]], scored: Scored) -> list[dict]:
        """Per input: ``tokens`` (the words), ``tags`` and ``entities`` (see the class doc)."""
        out = []
        for item, p in zip(items, scored.predictions):
            text = item if isinstance(item, str) else " ".join(item)
            spans = [(m.start(), m.end()) for m in _WORD.finditer(text)]
            entities = [
                {
                    "entity": kind,
                    "start": spans[s][0],
                    "end": spans[e - 1][1],
                    "text": text[spans[s][0] : spans[e - 1][1]],
                }
                for kind, s, e in tag_spans(p["tags"])
            ]
            out.append({**p, "entities": entities})
        return out


@dataclass
class QuestionAnswerer(TaskModel):
    """(question, context) -> the answer, its character span in the context and its n-best
    probability ("" and None when a v2.0 model finds no answer)."""

    families: ClassVar[tuple[str, ...]] = ("squad",)

    def __call__(
        self, question: str | Sequence[tuple[str, str]], context: str | None = None
    ) -> list[dict]:
        pairs = [(question, context)] if isinstance(question, str) else list(question)
        return self.outputs(self.run(self.examples_of(pairs)))

    @staticmethod
    def examples_of(pairs: Sequence[tuple[str, str | None]]) -> list[SquadExample]:
        return [SquadExample(str(i), q, c or "", ()) for i, (q, c) in enumerate(pairs)]

    @staticmethod
    def outputs(scored: Scored) -> list[dict]:
        """Per input, in input order: ``answer``, ``start``, ``end``, ``probability`` and
        ``null_score_diff``."""
        preds = {p["id"]: p for p in scored.predictions}
        return [{k: v for k, v in preds[str(i)].items() if k != "id"} for i in range(len(preds))]


@dataclass
class ChoiceScorer(TaskModel):
    """(context, endings) -> the index of the best ending and the probabilities."""

    families: ClassVar[tuple[str, ...]] = ("swag",)

    def __call__(self, context: str, endings: Sequence[str], start: str = "") -> dict:
        ex = MultipleChoiceExample("0", context, start, tuple(endings), None)
        pred = self.run([ex]).predictions[0]
        return {"label": pred["label"], "probabilities": pred["probabilities"]}
