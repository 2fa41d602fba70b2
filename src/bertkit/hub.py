"""Model folders from wherever users keep them: a path, or a Hugging Face Hub id.

Every command's ``--model`` and every loader (``load_pretrained``, ``BertTokenizer.from_pretrained``,
``Embedder.load``, ``TaskModel.load``, ``FillMasker.load``, the server) goes through
:func:`resolve`: an existing folder is that folder; anything else that reads as a Hub id
(``NAME`` or ``ORG/NAME``) is fetched with ``huggingface_hub.snapshot_download``, only the files
bertkit reads (weights as safetensors, configs, tokenizer files, sentence-transformers modules),
into the Hub's own cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``;
the layout ``models--ORG--NAME/snapshots/REV/``). With ``HF_HUB_OFFLINE=1``, or without network,
a populated cache answers alone. Nothing in a folder is executed: bertkit has no
``trust_remote_code`` and loads pickles only when the user allows them.

>>> resolve("tests/fixtures")  # doctest: +SKIP
PosixPath('tests/fixtures')
>>> resolve("sentence-transformers/all-MiniLM-L6-v2")  # doctest: +SKIP
PosixPath('/root/.cache/huggingface/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/c9745ed...')
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from bertkit.errors import CheckpointError, ConfigError

MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "model-*.safetensors",
    "model.safetensors.index.json",
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
    "2_Normalize/*",
    "bertkit_*.json",
)
"""What bertkit reads from a model folder: the files fetched for a Hub id."""
PICKLE_FILES = ("pytorch_model.bin",)
"""Fetched only when the caller allows pickles (``--allow-pickle``)."""

_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")


def is_hub_id(text: str) -> bool:
    """Whether ``text`` has the shape of a Hub model id: ``NAME`` or ``ORG/NAME`` (letters,
    digits, ``.``, ``_``, ``-``; no ``..``). Paths such as ``./run``, ``/data/m`` or ``a/b/c``
    are not."""
    parts = text.split("/")
    return 1 <= len(parts) <= 2 and all(_ID.fullmatch(p) and ".." not in p for p in parts)


def cache_dir() -> Path:
    """The Hub cache this process uses, read from the environment at each call."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def resolve(name: str | Path, revision: str | None = None, *, allow_pickle: bool = False) -> Path:
    """The local folder for ``name``: itself when it is a folder, else the Hub snapshot of the
    model id ``name`` at ``revision`` (a branch, tag or commit; default ``main``).

    Raises a one-line :class:`CheckpointError` (an OSError, as transformers raises for a model it
    cannot find) naming what was looked for and where: a path that is not a folder, an id that is
    neither cached (offline) nor on the Hub, a revision the Hub does not have, or
    ``huggingface_hub`` not installed; a ``revision`` for a local folder is a ConfigError.
    """
    path = Path(name).expanduser()
    if path.is_dir():
        if revision is not None:
            raise ConfigError(f"--revision {revision}: {name} is a local folder, not a Hub id")
        return path
    text = str(name)
    if path.exists():
        raise CheckpointError(f"{text}: not a model folder (a file; expected a folder or a Hub id)")
    if not is_hub_id(text):
        raise CheckpointError(f"{text}: no such folder (and not a Hub id of the form ORG/NAME)")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError as e:
        raise CheckpointError(
            f"{text}: no such folder; reading it as a Hub id needs huggingface_hub "
            "(pip install huggingface_hub)"
        ) from e
    where = cache_dir()
    at = f" at revision {revision}" if revision else ""
    patterns = [*MODEL_FILES, *(PICKLE_FILES if allow_pickle else ())]
    try:
        folder = snapshot_download(
            text,
            revision=revision,
            cache_dir=str(where),
            allow_patterns=patterns,
            local_files_only=offline(),
        )
    except RevisionNotFoundError as e:
        raise CheckpointError(f"{text}: the Hub model has no revision {revision!r}") from e
    except GatedRepoError as e:
        raise CheckpointError(
            f"{text}: a gated Hub model; log in (hf auth login) after access"
        ) from e
    except RepositoryNotFoundError as e:
        raise CheckpointError(
            f"{text}: no such folder, and no Hub model {text} (or it is private)"
        ) from e
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError) as e:
        why = "HF_HUB_OFFLINE=1" if offline() else "the Hub could not be reached"
        raise CheckpointError(
            f"{text}: no such folder, and the Hub model {text}{at} is not in the cache at "
            f"{where} ({why})"
        ) from e
    return Path(folder)
