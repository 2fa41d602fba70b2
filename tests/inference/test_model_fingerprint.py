"""The model fingerprint of a sharded output's manifest: what it hashes and what it leaves out."""

from __future__ import annotations

from pathlib import Path

from bertkit.inference.sharded import model_fingerprint


def _folder(root: Path) -> Path:
    root.mkdir()
    (root / "config.json").write_text('{"hidden_size": 32}')
    (root / "model.safetensors").write_bytes(b"weights")
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    return root


def test_a_save_left_unfinished_does_not_change_the_fingerprint(tmp_path: Path) -> None:
    """A SIGKILL during a save leaves a hidden work folder (``.staging-*``, bertkit.staging)
    holding a config.json: the model is the same, and a resumed embed job must still match."""
    folder = _folder(tmp_path / "m")
    before = model_fingerprint(folder)
    stray = folder / ".staging-abc123"
    stray.mkdir()
    (stray / "config.json").write_text('{"hidden_size": 64}')
    (folder / ".model.safetensors.partial").write_bytes(b"half")
    assert model_fingerprint(folder) == before
    # what it covers: a module's config one level down, and the weights
    (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    changed = model_fingerprint(folder)
    assert changed["sha256"] != before["sha256"] and changed["files"] == before["files"] == 3
