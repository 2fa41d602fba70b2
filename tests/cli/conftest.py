"""The CLI tests, one file per command; the fine-tuning commands run on the tiny checkpoint of
tests/finetune/conftest.py."""

from __future__ import annotations

from finetune.conftest import tiny_model  # noqa: F401 (a fixture: pytest finds it by name)
