"""What a model that ignores its input scores: the floor every pre-training accuracy is read against."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any


def input_blind_baselines(dataset: Sequence[Mapping[str, Any]], n: int) -> dict[str, float]:
    """What a model that ignores its input scores on the first ``n`` examples: MLM accuracy of
    always predicting the most frequent masked token, NSP accuracy of always the majority label.

    Needs static masks (the held-out data is prepared that way).
    """
    labels: Counter[int] = Counter()
    nsp = [0, 0]
    for i in range(min(n, len(dataset))):
        x = dataset[i]
        labels.update(int(t) for t in x["masked_labels"])
        nsp[x["next_sentence_label"]] += 1
    total = max(1, sum(labels.values()))
    return {
        "mlm_acc": labels.most_common(1)[0][1] / total if labels else 0.0,
        "nsp_acc": max(nsp) / max(1, sum(nsp)),
    }
