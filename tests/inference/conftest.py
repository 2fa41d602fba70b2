"""The fine-tuning tests' tiny checkpoint (tests/finetune/conftest.py), which the inference
classes load once fine-tuned."""

from __future__ import annotations

from finetune.conftest import tiny_model  # noqa: F401 (a fixture: pytest finds it by name)
