"""Fine-tuning tasks, one module per family: read -> encode -> collate -> decode -> score.

- ``base``: the :class:`TaskAdapter` protocol and :class:`Scored`.
- ``classification`` (glue, classify), ``tagging`` (ner, tag), ``span_qa`` (squad),
  ``multiple_choice`` (swag): the families.
- ``features``: token ids, segment ids, labels and padding for classification, multiple choice
  and tagging windows; ``squad_features`` / ``squad_post``: SQuAD windows and span search.
- ``registry``: families by name, :func:`build_task`; ``saved``: :func:`load_adapter`, a saved
  task rebuilt.

File readers live in :mod:`bertkit.data.tasks`, metrics in :mod:`bertkit.evaluation`.
"""

from bertkit.tasks.base import TASK_FILE, Scored, TaskAdapter
from bertkit.tasks.classification import ClassificationAdapter
from bertkit.tasks.multiple_choice import MultipleChoiceAdapter
from bertkit.tasks.registry import FAMILIES, TaskSettings, build_task, default_max_seq_length
from bertkit.tasks.saved import adapter_from_state, load_adapter
from bertkit.tasks.span_qa import SquadAdapter
from bertkit.tasks.tagging import TaggingAdapter, tag_label_list

__all__ = [
    "FAMILIES",
    "TASK_FILE",
    "ClassificationAdapter",
    "MultipleChoiceAdapter",
    "Scored",
    "SquadAdapter",
    "TaggingAdapter",
    "TaskAdapter",
    "TaskSettings",
    "adapter_from_state",
    "build_task",
    "default_max_seq_length",
    "load_adapter",
    "tag_label_list",
]
