"""``finetune rerank --loss ranking``'s in-batch negatives and ``--loss listnet`` on graded lists
of different lengths: the same draws, loss and gradients as sentence-transformers' CrossEncoder
``MultipleNegativesRankingLoss`` / ``ListNetLoss`` on the same tiny cross-encoder and texts.

How the draws are made equal: sentence-transformers draws with ``torch.multinomial`` from the
global generator; :func:`bertkit.tasks.rerank.in_batch_negatives` makes the same call on
the same candidate layout from an explicit generator, so ``torch.manual_seed(s)`` before their
loss and ``torch.Generator().manual_seed(s)`` for ours pick the same documents (checked first,
text by text, then through the loss)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertkit.data.tasks.listwise import RankedList
from bertkit.data.tasks.retrieval import TrainingPair
from bertkit.interop.pretrained import load_pretrained
from bertkit.tasks.rerank import RerankAdapter, in_batch_negatives
from bertkit.tokenizer import BertTokenizer

GROUPS = [
    ("good", "the movie was good", ["the film was bad", "a cat sat on the mat"]),
    ("bad", "the dog was bad", ["good good plot", "the movie was lovely"]),
    ("lovely", "a lovely film", ["the mat was bad", "dog and cat"]),
]
LISTS = [  # graded labels, three lengths
    ("good", ["the movie was good", "good good plot", "the film was bad"], [2.0, 1.0, 0.0]),
    ("bad", ["the dog was bad", "a cat"], [1.0, 0.0]),
    ("lovely", ["a lovely film", "dog and cat", "the mat", "lovely lovely"], [3.0, 0.0, 0.0, 2.5]),
]


def _st_mnrl(folder: Path, num_negatives: int | None):
    st = pytest.importorskip("sentence_transformers")
    ce = st.CrossEncoder(str(folder), device="cpu").eval()
    return ce, st.cross_encoder.losses.MultipleNegativesRankingLoss(ce, num_negatives=num_negatives)


@pytest.mark.parametrize("num", [1, 4, 6, None])  # 6 of 6 others (all, in order), None: all
def test_the_draws_are_sentence_transformers(cross_encoder_folder: Path, num: int | None) -> None:
    _ce, theirs = _st_mnrl(cross_encoder_folder, num)
    anchors = [q for q, _, _ in GROUPS]
    columns = [[p for _, p, _ in GROUPS]] + [[n[k] for _, _, n in GROUPS] for k in range(2)]
    for seed in range(3):
        torch.manual_seed(seed)
        expected = list(zip(*theirs.get_in_batch_negatives(anchors, columns), strict=True))
        picks = in_batch_negatives([3, 3, 3], num, torch.Generator().manual_seed(seed))
        got = [tuple(columns[c][g] for g, c in row) for row in picks]
        assert got == [tuple(x) for x in expected]
        assert all(g != b for b, row in enumerate(picks) for g, _ in row)  # never its own


def test_the_draws_of_lists_of_different_lengths() -> None:
    """Sizes 1, 2, 4: a group draws only candidates that exist, of other groups; one with
    no more than ``num`` to choose from takes them all."""
    picks = in_batch_negatives([1, 2, 4], 3, torch.Generator().manual_seed(0))
    sizes = [1, 2, 4]
    for b, row in enumerate(picks):
        assert all(g != b and c < sizes[g] for g, c in row)
        assert len(set(row)) == len(row) == min(3, 7 - sizes[b])
    assert sorted(picks[2]) == [(0, 0), (1, 0), (1, 1)]  # 3 others: all of them


def _encode(folder: Path, adapter: RerankAdapter, examples: list, seed: int | None):
    features = adapter.encode(BertTokenizer.from_pretrained(folder), examples, training=True)
    draws = None if seed is None else torch.Generator().manual_seed(seed)
    batch = adapter.collate(features, 0, training=True, draws=draws)
    return {k: torch.from_numpy(v) for k, v in batch.items()}


def _ours(folder: Path, loss: str, examples: list, seed: int | None = None, num: int = 4):
    """Our head's loss on ``examples`` through the adapter, and its gradients: (loss, grads of
    the classifier weight and the word embeddings)."""
    adapter = RerankAdapter("rerank", "t", loss=loss, num_negatives=num)
    batch = _encode(folder, adapter, examples, seed)
    model = load_pretrained(folder, "BertForSequenceClassification").eval()
    model.group_loss = adapter.group_loss
    out = model(**batch).loss
    out.backward()
    return out.detach(), model.classifier.weight.grad, model.bert.embeddings.word.weight.grad


def _grads(ce) -> tuple[torch.Tensor, torch.Tensor]:
    hf = ce.model
    return hf.classifier.weight.grad, hf.bert.embeddings.word_embeddings.weight.grad


@pytest.mark.parametrize("num", [2, 4, None])
def test_ranking_with_in_batch_negatives_is_sentence_transformers(
    cross_encoder_folder: Path, num: int | None
) -> None:
    ce, theirs_loss = _st_mnrl(cross_encoder_folder, num)
    examples = [TrainingPair(q, p, tuple(n)) for q, p, n in GROUPS]
    for seed in (0, 1):
        ce.model.zero_grad()
        torch.manual_seed(seed)  # their draws: the global generator
        inputs = [[q for q, _, _ in GROUPS], [p for _, p, _ in GROUPS]]
        inputs += [[n[k] for _, _, n in GROUPS] for k in range(2)]
        theirs = theirs_loss(inputs, None)
        theirs.backward()
        loss, *grads = _ours(
            cross_encoder_folder, "ranking", examples, seed, 9 if num is None else num
        )
        torch.testing.assert_close(loss, theirs.detach(), rtol=0, atol=1e-6)
        for ours_grad, their_grad in zip(grads, _grads(ce), strict=True):
            torch.testing.assert_close(ours_grad, their_grad, rtol=0, atol=1e-6)
    # the draws matter (negative control): another seed, another loss; none drawn, a third
    picked = [float(_ours(cross_encoder_folder, "ranking", examples, s, 2)[0]) for s in (0, 5)]
    alone = float(_ours(cross_encoder_folder, "ranking", examples, None)[0])
    assert len({*picked, alone}) == 3


def test_listnet_on_graded_lists_of_different_lengths_is_sentence_transformers(
    cross_encoder_folder: Path,
) -> None:
    st = pytest.importorskip("sentence_transformers")
    ce = st.CrossEncoder(str(cross_encoder_folder), device="cpu").eval()
    theirs = st.cross_encoder.losses.ListNetLoss(ce)(
        [[q for q, _, _ in LISTS], [d for _, d, _ in LISTS]],
        [torch.tensor(y) for _, _, y in LISTS],
    )
    theirs.backward()
    examples = [RankedList(q, tuple(d), tuple(y)) for q, d, y in LISTS]
    loss, *grads = _ours(cross_encoder_folder, "listnet", examples, seed=0)  # draws nothing
    torch.testing.assert_close(loss, theirs.detach(), rtol=0, atol=1e-6)
    for ours_grad, their_grad in zip(grads, _grads(ce), strict=True):
        torch.testing.assert_close(ours_grad, their_grad, rtol=0, atol=1e-6)
