"""The tiny fine-tuning setup shared by tests/training/finetune, tests/cli and tests/inference: a
tiny random BERT saved like a real checkpoint (the session fixture ``tiny_model`` of
tests/conftest.py builds it once), with a hand-made whole-word vocabulary covering the task
fixtures and the synthetic data below."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from bertkit.config import BertConfig
from bertkit.interop import save_pretrained
from bertkit.model import BertModel
from bertkit.tokenizer import BertTokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
POSITIVE = ["good", "great", "fine", "lovely", "superb", "nice"]
NEGATIVE = ["bad", "awful", "poor", "dull", "horrid", "weak"]
FILLER = ["the", "movie", "was", "really", "quite", "film", "plot", "acting", "very"]


def _fixture_words() -> set[str]:
    words: set[str] = set()
    for path in FIXTURES.rglob("task_*"):
        files = [path] if path.is_file() else list(path.rglob("*.tsv"))
        for f in files:
            words.update(re.findall(r"\w+|[^\w\s]", f.read_text(encoding="utf-8").lower()))
    return words


def build_tiny_model(
    d: Path, pieces: list[str] | None = None, model_class: type = BertModel
) -> Path:
    """A 2-layer, hidden-32 ``model_class`` (default BertModel, no heads) + vocab.txt, saved with
    save_pretrained in ``d``; ``pieces``: the vocabulary after the specials (default: every word
    of the fixtures)."""
    if pieces is None:
        pieces = sorted(_fixture_words() | set(POSITIVE + NEGATIVE + FILLER) - set(SPECIALS))
    d.mkdir(parents=True, exist_ok=True)
    (d / "vocab_src.txt").write_text("\n".join(SPECIALS + pieces) + "\n", encoding="utf-8")
    tok = BertTokenizer(d / "vocab_src.txt")
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    save_pretrained(model_class(config), d, tok)
    return d


def write_teacher(out: Path, adapter, words: list[str]) -> Path:
    """A distillation teacher folder for ``adapter``'s task (a random head of its
    ``head_class`` on a random 2-layer encoder) whose vocabulary holds ``words`` in this order:
    a tokenizer of its own."""
    from bertkit import model as heads
    from bertkit.training.model_dir import save_model_dir

    out.mkdir(parents=True)
    (out / "vocab_src.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    tok = BertTokenizer(out / "vocab_src.txt")
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        initializer_range=0.5,  # logits that differ with the input, not all near 0
        **adapter.config_overrides(),
    )
    torch.manual_seed(11)
    save_model_dir(getattr(heads, adapter.head_class)(config), adapter, tok, out)
    return out


def write_sentiment(directory: Path, n_train: int = 48, n_dev: int = 16, seed: int = 0) -> Path:
    """A synthetic SST-2-layout task: the label is whether the sentence holds a positive word."""
    g = torch.Generator().manual_seed(seed)

    def rows(n: int) -> list[str]:
        out = ["sentence\tlabel"]
        for i in range(n):
            label = i % 2
            bank = POSITIVE if label else NEGATIVE
            k = int(torch.randint(len(bank), (1,), generator=g))
            fill = [FILLER[int(j)] for j in torch.randint(len(FILLER), (4,), generator=g)]
            out.append(f"{' '.join(fill[:2])} {bank[k]} {' '.join(fill[2:])}\t{label}")
        return out

    task = directory / "SST-2"
    task.mkdir(parents=True, exist_ok=True)
    (task / "train.tsv").write_text("\n".join(rows(n_train)) + "\n", encoding="utf-8")
    (task / "dev.tsv").write_text("\n".join(rows(n_dev)) + "\n", encoding="utf-8")
    return directory
