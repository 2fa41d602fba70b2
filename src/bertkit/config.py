"""BertConfig: the model's hyperparameters, with field names equal to Hugging Face config.json keys."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import ConfigError

_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "tanh")


@dataclass
class BertConfig:
    """Hyperparameters of a BERT encoder and its heads.

    Every field name is the key Hugging Face writes in ``config.json`` for ``model_type: bert``,
    so a config round-trips through ``to_dict``/``from_dict`` with transformers.
    """

    vocab_size: int = 30522
    """Rows of the word-embedding matrix (and columns of the MLM decoder)."""
    hidden_size: int = 768
    """H: width of every token representation."""
    num_hidden_layers: int = 12
    """L: number of encoder layers."""
    num_attention_heads: int = 12
    """A: attention heads per layer; must divide hidden_size."""
    intermediate_size: int = 3072
    """Width of the feed-forward inner layer (4H in the paper)."""
    hidden_act: str = "gelu"
    """Feed-forward activation: exact erf GELU for "gelu", as in the original BERT."""
    hidden_dropout_prob: float = 0.1
    """Dropout on embeddings, attention output and feed-forward output."""
    attention_probs_dropout_prob: float = 0.1
    """Dropout on attention probabilities."""
    max_position_embeddings: int = 512
    """Longest sequence the learned position embeddings cover."""
    type_vocab_size: int = 2
    """Number of segment (token type) ids: A and B."""
    initializer_range: float = 0.02
    """Std of the normal initialiser (truncated at 2 std in the original, plain normal in HF)."""
    layer_norm_eps: float = 1e-12
    """Epsilon of every LayerNorm."""
    pad_token_id: int = 0
    """Id of [PAD] (its word-embedding row is not special-cased, as in HF BERT)."""
    num_labels: int = 2
    """Outputs of a classification head; 1 means regression (STS-B)."""
    classifier_dropout: float | None = None
    """Dropout before a task head; None falls back to hidden_dropout_prob."""
    problem_type: str | None = None
    """HF's problem_type for sequence classification: regression, single_label_classification."""
    id2label: dict[int, str] | None = None
    """Optional label names by id, as in HF config.json."""
    is_decoder: bool = False
    """Causal (left-to-right) self-attention: each token attends to itself and the tokens before
    it (the paper's LTR baseline; ``bertkit pretrain --objective ltr``)."""
    architectures: list[str] | None = None
    """HF class names this config was saved with (informational)."""
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    """Keys of a loaded config.json that bertkit does not use; written back on save."""

    def __post_init__(self) -> None:
        positive = (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            p = getattr(self, name)
            if not 0.0 <= p < 1.0:
                raise ConfigError(f"BertConfig.{name} must be in [0, 1), got {p!r}")
        if self.hidden_act not in _ACTIVATIONS:
            raise ConfigError(f"hidden_act must be one of {_ACTIVATIONS}, got {self.hidden_act!r}")
        if self.num_labels < 1:
            raise ConfigError(f"num_labels must be >= 1, got {self.num_labels}")
        if self.id2label is not None:
            self.id2label = {int(k): str(v) for k, v in self.id2label.items()}
            self.num_labels = len(self.id2label)

    @property
    def head_dim(self) -> int:
        """D: width of one attention head."""
        return self.hidden_size // self.num_attention_heads

    # ---- serialisation ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A config.json dictionary that transformers' BertConfig reads."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        d = {k: v for k, v in d.items() if v is not None}
        if self.id2label is not None:
            d["id2label"] = {str(k): v for k, v in self.id2label.items()}
            d["label2id"] = {v: k for k, v in self.id2label.items()}
        out = dict(self.extra)
        out.update(d)
        out["model_type"] = "bert"
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BertConfig:
        """Build from a config.json dictionary; unknown keys are kept in ``extra``."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in d.items() if k in names}
        extra = {
            k: v for k, v in d.items() if k not in names and k not in ("model_type", "label2id")
        }
        if "num_labels" not in known and "id2label" not in known and "label2id" in d:
            known["num_labels"] = len(d["label2id"])
        try:
            return cls(**known, extra=extra)
        except TypeError as e:
            raise ConfigError(f"invalid config: {e}") from e

    @classmethod
    def from_json_file(cls, path: str | Path) -> BertConfig:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            raise ConfigError(f"{path}: config file not found") from e
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from e
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a JSON object")
        return cls.from_dict(data)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> BertConfig:
        """A named size: the paper's base/large or Google's small-BERT grid (tiny..medium)."""
        try:
            sizes = PRESETS[name]
        except KeyError as e:
            raise ConfigError(f"unknown model size {name!r}; choose from {sorted(PRESETS)}") from e
        return cls(**{**sizes, **overrides})


def _size(layers: int, hidden: int, heads: int) -> dict[str, int]:
    return {
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "intermediate_size": 4 * hidden,
    }


# Google's small BERTs use H/64 heads; the paper's Base and Large are L12/H768/A12 and L24/H1024/A16.
PRESETS: dict[str, dict[str, int]] = {
    "tiny": _size(2, 128, 2),
    "mini": _size(4, 256, 4),
    "small": _size(4, 512, 8),
    "medium": _size(8, 512, 8),
    "base": _size(12, 768, 12),
    "large": _size(24, 1024, 16),
}
