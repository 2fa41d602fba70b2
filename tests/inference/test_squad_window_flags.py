"""``TaskModel.with_windows`` on a SQuAD model: --doc-stride applies, the other window flags are
a one-line ConfigError (never silently dropped)."""

from __future__ import annotations

import pytest

from bertkit.errors import ConfigError
from bertkit.inference.task_model import TaskModel
from bertkit.tasks.span_qa import SquadAdapter
from bertkit.tasks.squad_features import SquadFeatureConfig
from bertkit.tasks.windows import WindowConfig


def _squad_model() -> TaskModel:
    windows = SquadFeatureConfig(WindowConfig(doc_stride=32, stride_mode="step"), 16)
    return TaskModel(SquadAdapter("squad", "squad1", 128, windows=windows), None, None)  # type: ignore[arg-type]


def test_doc_stride_applies_to_the_context_windows():
    tm = _squad_model().with_windows(doc_stride=8, truncate=None, window_pooling=None)
    assert tm.adapter.windows == SquadFeatureConfig(
        WindowConfig(doc_stride=8, stride_mode="step"), 16
    )
    assert _squad_model().with_windows(doc_stride=None).adapter.windows.window.doc_stride == 32


def test_flags_squad_cannot_honour_are_one_line_errors():
    with pytest.raises(ConfigError) as e:
        _squad_model().with_windows(truncate=True, window_pooling="max", doc_stride=8)
    assert str(e.value) == (
        "--truncate, --window-pooling: a squad model reads every window of a long context and "
        "keeps the best span; only --doc-stride applies"
    )
