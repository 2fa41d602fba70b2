"""What the model is trained on matches the text: raw corpus -> prepare -> shards -> dataset ->
collate (static and dynamic masks) -> batch tensors -> the model's MLM/NSP losses.

The corpus is made of unique words ``d{doc}s{sentence}w{k}``, so every token names the document
and sentence it came from: an instance's A and B segments, its next-sentence label and its MLM
labels can be checked against the text exactly (a label/instance mismatch anywhere in the chain
leaves NSP at chance while training still "runs").
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit.config import BertConfig
from bertkit.data.corpus import CorpusOptions
from bertkit.data.prepare import PrepareSettings, prepare_pretraining
from bertkit.data.pretraining import InstanceConfig
from bertkit.data.shards import PretrainingDataset
from bertkit.model import BertForPreTraining
from bertkit.training.pretraining import make_collate

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
DOCS, SENTENCES, WORDS = 12, 9, 4
WORD = re.compile(r"d(\d+)s(\d+)w(\d+)")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("align")
    words = [f"d{d}s{s}w{w}" for d in range(DOCS) for s in range(SENTENCES) for w in range(WORDS)]
    (root / "vocab.txt").write_text("\n".join(SPECIALS + words) + "\n")
    corpus = "".join(
        "".join(" ".join(f"d{d}s{s}w{w}" for w in range(WORDS)) + "\n" for s in range(SENTENCES))
        + "\n"
        for d in range(DOCS)
    )
    (root / "corpus.txt").write_text(corpus)
    out = {}
    for name, dynamic in (("static", False), ("dynamic", True)):
        settings = PrepareSettings(
            instance=InstanceConfig(max_seq_length=24, dupe_factor=2),
            corpus=CorpusOptions(format="bert"),
            dynamic_masking=dynamic,
            seed=3,
        )
        prepare_pretraining(
            [root / "corpus.txt"], root / "vocab.txt", root / name, settings, show_progress=False
        )
        out[name] = root / name
    return out


def _word(vocab: list[str], i: int) -> tuple[int, int, int]:
    m = WORD.fullmatch(vocab[i])
    assert m is not None, vocab[i]
    d, s, w = map(int, m.groups())
    return d, s, w


def _check_instance(vocab, ids, types, labels, mask, nsp) -> None:
    """One collated row against the corpus (ids already restored at the labelled positions)."""
    n = int(mask.sum())
    assert (mask[:n] == 1).all() and (mask[n:] == 0).all()
    row = ids[:n].copy()
    labelled = labels[:n] != -100
    row[labelled] = labels[:n][labelled]  # the original text
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    assert row[0] == cls and row[-1] == sep
    seps = np.flatnonzero(row == sep)
    assert len(seps) == 2
    assert (types[: seps[0] + 1] == 0).all() and (types[seps[0] + 1 : n] == 1).all()
    assert not labelled[[0, seps[0], seps[1]]].any()  # specials are never predicted
    a = [_word(vocab, int(t)) for t in row[1 : seps[0]]]
    b = [_word(vocab, int(t)) for t in row[seps[0] + 1 : seps[1]]]
    assert a and b
    # A is a contiguous run of the text (truncation only trims its ends)
    flat = [(d, s * WORDS + w) for d, s, w in a]
    assert len({d for d, _ in flat}) == 1
    assert [k for _, k in flat] == list(range(flat[0][1], flat[0][1] + len(flat)))
    b_docs = {d for d, _, _ in b}
    if nsp == 0:  # actual next: B is the text right after A (B may lose words at its front)
        assert b_docs == {a[0][0]}
        b_pos = [s * WORDS + w for _, s, w in b]
        assert b_pos == list(range(b_pos[0], b_pos[0] + len(b_pos)))
        assert b_pos[0] > flat[-1][1]
    else:  # random next: B is from another document
        assert nsp == 1 and a[0][0] not in b_docs


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_batches_match_the_text(prepared, kind) -> None:
    ds = PretrainingDataset(prepared[kind])
    vocab = (prepared[kind] / "vocab.txt").read_text().split("\n")[:-1]
    collate = make_collate(ds, seed=5)
    labels_seen = [0, 0]
    n_masked = 0
    for start in range(0, len(ds), 16):
        items = [ds[i] for i in range(start, min(len(ds), start + 16))]
        batch = collate(items, [1] * len(items))
        for r, item in enumerate(items):
            nsp = int(batch["next_sentence_label"][r])
            assert nsp == item["next_sentence_label"]
            labels_seen[nsp] += 1
            n_masked += int((batch["labels"][r] != -100).sum())
            _check_instance(
                vocab,
                batch["input_ids"][r].numpy(),
                batch["token_type_ids"][r].numpy(),
                batch["labels"][r].numpy(),
                batch["attention_mask"][r].numpy(),
                nsp,
            )
    assert min(labels_seen) > 0.25 * sum(labels_seen)
    # masked count per instance follows round(0.15 * length) >= 1
    assert n_masked >= len(ds)


def test_model_losses_use_the_batch_labels(prepared) -> None:
    """The model's MLM loss is the cross-entropy at the labelled positions (no shift) and its NSP
    loss uses 0 = actual next, 1 = random, as Hugging Face's BertForPreTraining."""
    ds = PretrainingDataset(prepared["static"])
    batch = make_collate(ds, seed=0)([ds[i] for i in range(8)], [0] * 8)
    torch.manual_seed(0)
    model = BertForPreTraining(
        BertConfig.preset("tiny", vocab_size=len(SPECIALS) + DOCS * SENTENCES * WORDS)
    ).eval()
    with torch.no_grad():
        out = model(**batch)
        full = model(
            batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
        )
    sel = batch["labels"] != -100
    mlm = F.cross_entropy(full.prediction_logits[sel], batch["labels"][sel])
    nsp = F.cross_entropy(full.seq_relationship_logits, batch["next_sentence_label"])
    torch.testing.assert_close(out.mlm_loss, mlm)
    torch.testing.assert_close(out.nsp_loss, nsp)
    pred = full.prediction_logits[sel].argmax(-1)
    assert int(out.mlm_correct) == int((pred == batch["labels"][sel]).sum())
    nsp_pred = full.seq_relationship_logits.argmax(-1)
    assert int(out.nsp_correct) == int((nsp_pred == batch["next_sentence_label"]).sum())
