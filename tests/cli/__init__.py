"""The CLI tests, one file per command; the fine-tuning commands run on the tiny checkpoint of
tests/support/tiny_glue.py (the ``tiny_model`` fixture of tests/conftest.py)."""
