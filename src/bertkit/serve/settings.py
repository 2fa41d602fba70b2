"""The server's options (``bertkit serve --help``): models, limits and how to run them.

Limits follow text-embeddings-inference's names and defaults, so a TEI user finds them where
they expect: ``max_batch_tokens`` 16384, ``max_concurrent_requests`` 512,
``max_client_batch_size`` 32, a 2 MB payload limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bertkit import precision as P
from bertkit.errors import CheckpointError, ConfigError

BACKENDS = ("torch", "onnx")


@dataclass
class ServeSettings:
    models: list[str] = field(default_factory=list)
    """Model folders or Hub ids, each DIR or NAME=DIR (the folder decides the task)."""
    revision: str | None = None
    """The branch, tag or commit of every Hub id given as a model (default: main)."""
    host: str = "127.0.0.1"
    """Address to bind (127.0.0.1 unless told otherwise)."""
    port: int = 8080
    """TCP port."""
    pooling: str | None = None
    """Embedding pooling: mean, cls or max (None: the folder's sentence-transformers config, else mean)."""
    precision: str = P.DEFAULT
    """See bertkit.precision."""
    backend: str = "torch"
    """torch (each folder's weights), or onnx (each folder's .onnx file from `bertkit export onnx`,
    run by ONNX Runtime; --precision does not apply: the file is what it was exported as)."""
    device: str = "auto"
    """cpu, cuda or cuda:N (auto: CUDA when available)."""
    max_batch_tokens: int = 16384
    """Tokens (padded) in one forward pass across concurrent requests."""
    max_client_batch_size: int = 32
    """Inputs in one request; more is a 413."""
    max_input_tokens: int = 8192
    """Tokens of one input: longer than the model's limit it is read in windows, longer than this a
    413 (or, with "truncate": true, cut to the model's limit)."""
    max_concurrent_requests: int = 512
    """Requests in flight; more are refused with 429 and Retry-After."""
    payload_limit: int = 2_000_000
    """Request body bytes; more is a 413."""
    api_key: str | None = None
    """Required as 'Authorization: Bearer KEY' on every route but /health (None: open)."""
    workers: int = 1
    """Server processes (each loads the models)."""
    request_timeout: float = 60.0
    """Seconds a request may wait for its result; then 504."""
    threads: int | None = None
    """CPU threads for the model (None: torch's default)."""
    any_dimensions: bool = False
    """Accept "dimensions" for a model not trained with Matryoshka (bertkit_embedding.json names
    no sizes): its cut vectors were never trained as embeddings, so by default that is a 422."""
    allow_pickle: bool = False
    """Permit folders whose weights are only a pytorch_model.bin (read with torch.load
    weights_only, as every command's --allow-pickle); without it such a folder is refused."""
    split_special_tokens: bool = True
    """Literal [CLS], [SEP], [PAD], [UNK] in request text are text (untrusted input cannot inject
    special tokens); /fill-mask still reads [MASK]."""

    def __post_init__(self) -> None:
        if not self.models:
            raise ConfigError("serve needs at least one --model DIR (or NAME=DIR)")
        for name in (
            "max_batch_tokens",
            "max_client_batch_size",
            "max_concurrent_requests",
            "payload_limit",
            "workers",
            "max_input_tokens",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.request_timeout <= 0:
            raise ConfigError(f"request timeout must be > 0, got {self.request_timeout}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.pooling not in (None, "mean", "cls", "max"):
            raise ConfigError(f"pooling must be mean, cls or max, got {self.pooling!r}")
        self._named = self._resolve_models()  # checks the folders, fetches Hub ids once

    def named_models(self) -> dict[str, Path]:
        """``{name: folder}`` (see :meth:`_resolve_models`)."""
        return dict(self._named)

    def _resolve_models(self) -> dict[str, Path]:
        """``{name: folder}``; a bare DIR is named after the folder, a bare Hub id after its
        last part (``sentence-transformers/all-MiniLM-L6-v2`` -> ``all-MiniLM-L6-v2``)."""
        from bertkit import hub
        from bertkit.interop.pretrained import PICKLE_REFUSED, pickle_only

        out: dict[str, Path] = {}
        for spec in self.models:
            name, sep, directory = spec.partition("=")
            given = directory if sep else spec
            try:
                path = hub.resolve(
                    given,
                    None if Path(given).is_dir() else self.revision,
                    allow_pickle=self.allow_pickle,
                )
            except (ConfigError, CheckpointError) as e:
                raise ConfigError(f"--model {spec}: {e}") from e
            pickled = pickle_only(path) if self.backend == "torch" else None
            if pickled is not None and not self.allow_pickle:  # refused now, not at load
                raise ConfigError(f"--model {spec}: {PICKLE_REFUSED.format(path=pickled)}")
            if not sep:
                name = path.resolve().name if Path(given).is_dir() else given.split("/")[-1]
            if name in out:
                raise ConfigError(f"--model {spec}: the name {name!r} is used twice")
            out[name] = path
        return out
