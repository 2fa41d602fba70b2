"""Fine-tuning task data: readers, feature conversion and post-processing.

Modules (import them directly; this package imports nothing on its own):

- ``glue``: the nine GLUE tasks in their original TSV formats, the task registry, file layout.
- ``conll``: CoNLL column files, IOB1/IOB2/IOBES tag schemes and conlleval chunking.
- ``squad``: SQuAD v1.1/v2.0 JSON; ``squad_features``: sliding windows and answer positions;
  ``squad_post``: n-best span search, null score and threshold tuning.
- ``swag``: SWAG multiple-choice CSV.
- ``custom``: the user's own CSV/TSV/JSONL for classification and tagging.
- ``features``: token ids, segment ids and labels for classification, multiple choice and NER.

See docs/tasks.md for the formats and the API the fine-tuning trainer builds on.
"""
