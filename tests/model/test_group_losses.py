"""The rerank group losses (:mod:`bertkit.model.group_losses`): hand-made values, and the same
loss as sentence-transformers' CrossEncoder ``MultipleNegativesRankingLoss`` / ``ListNetLoss``
on the same logits and, end to end, on the same tiny cross-encoder and texts."""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import pytest
import torch

from bertkit.data.tasks.retrieval import TrainingPair
from bertkit.interop.pretrained import load_pretrained
from bertkit.model.group_losses import GROUP_LOSSES, listnet_loss, ranking_loss
from bertkit.tasks.rerank import LOSSES, RerankAdapter
from bertkit.tokenizer import BertTokenizer


def test_the_losses_on_hand_made_logits() -> None:
    # equal logits: scale * sigmoid(0) = 5 for both candidates, the positive's chance 1/2
    assert float(ranking_loss(torch.zeros(1, 2))) == pytest.approx(math.log(2))
    # a positive far ahead: sigmoid saturates, scores 10 vs 0
    far = float(ranking_loss(torch.tensor([[50.0, -50.0]])))
    assert far == pytest.approx(math.log(1 + math.exp(-10)), abs=1e-6)  # fp32
    # listnet: target softmax([1, 0]) = (e / (e + 1), 1 / (e + 1)), prediction (1/2, 1/2)
    e = math.e
    got = float(listnet_loss(torch.zeros(1, 2), torch.tensor([[1.0, 0.0]])))
    assert got == pytest.approx((e / (e + 1) + 1 / (e + 1)) * math.log(2))


def test_the_loss_names_agree() -> None:
    assert ("bce", *GROUP_LOSSES) == LOSSES


def test_ranking_is_sentence_transformers_calculate_loss_on_the_same_logits() -> None:
    st = pytest.importorskip("sentence_transformers")
    mnrl = st.cross_encoder.losses.MultipleNegativesRankingLoss
    defaults = inspect.signature(mnrl.__init__).parameters
    theirs = mnrl.__new__(mnrl)  # calculate_loss reads no model: skip the CrossEncoder check
    torch.nn.Module.__init__(theirs)
    theirs.activation_fn = defaults["activation_fn"].default
    theirs.scale = defaults["scale"].default
    theirs.cross_entropy_loss = torch.nn.CrossEntropyLoss()
    logits = torch.randn(5, 4, generator=torch.Generator().manual_seed(0)) * 3  # (B, G)
    expected = theirs.calculate_loss([logits[:, j] for j in range(4)], 5)
    torch.testing.assert_close(ranking_loss(logits), expected, rtol=0, atol=1e-6)


GROUPS = [
    ("good", "the movie was good", ["the film was bad", "a cat sat on the mat"]),
    ("bad", "the dog was bad", ["good good plot", "the movie was lovely"]),
]


def _ours(folder: Path, loss: str, groups: list) -> torch.Tensor:
    """Our head's loss on ``groups`` through the rerank adapter's encode and collate."""
    adapter = RerankAdapter("rerank", "t", loss=loss)
    examples = [TrainingPair(q, p, tuple(n)) for q, p, n in groups]
    features = adapter.encode(BertTokenizer.from_pretrained(folder), examples, training=True)
    batch = adapter.collate(features, 0, training=True)
    model = load_pretrained(folder, "BertForSequenceClassification").eval()
    model.group_loss = adapter.group_loss
    with torch.no_grad():
        return model(**{k: torch.from_numpy(v) for k, v in batch.items()}).loss


def test_ranking_equals_sentence_transformers_on_one_group(cross_encoder_folder: Path) -> None:
    """A batch of one group: sentence-transformers has no other group to draw in-batch
    negatives from, so its loss is the group's alone, as bertkit's always is."""
    st = pytest.importorskip("sentence_transformers")
    ce = st.CrossEncoder(str(cross_encoder_folder), device="cpu").eval()
    theirs_loss = st.cross_encoder.losses.MultipleNegativesRankingLoss(ce)
    for q, p, negs in GROUPS:
        with torch.no_grad():
            theirs = theirs_loss([[q], [p], *[[n] for n in negs]], None)
        ours = _ours(cross_encoder_folder, "ranking", [(q, p, negs)])
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def test_listnet_equals_sentence_transformers(cross_encoder_folder: Path) -> None:
    st = pytest.importorskip("sentence_transformers")
    ce = st.CrossEncoder(str(cross_encoder_folder), device="cpu").eval()
    theirs_loss = st.cross_encoder.losses.ListNetLoss(ce)
    docs = [[p, *negs] for _, p, negs in GROUPS]
    labels = [torch.tensor([1.0] + [0.0] * len(negs)) for _, _, negs in GROUPS]
    with torch.no_grad():
        theirs = theirs_loss([[q for q, _, _ in GROUPS], docs], labels)
    ours = _ours(cross_encoder_folder, "listnet", GROUPS)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
