"""Official task metrics, numpy only.

- ``classification``: accuracy, F1 (binary, macro), Matthews correlation, Pearson, Spearman,
  and ``glue_metrics`` for a GLUE task's metric set.
- ``ner``: entity-level precision/recall/F1 with conlleval semantics and a per-type breakdown.
- ``pairs``: sentence embeddings on labelled pairs: Pearson/Spearman of each similarity against
  gold scores (STS), best-threshold accuracy/F1, average precision for 0/1 labels, as
  sentence-transformers' EmbeddingSimilarityEvaluator and BinaryClassificationEvaluator.
- ``squad``: SQuAD v1.1/v2.0 exact match and F1 with the official normalisation.
"""
