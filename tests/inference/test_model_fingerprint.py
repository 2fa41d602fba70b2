"""The model fingerprint of a sharded output's manifest: what it hashes and what it leaves out."""

from __future__ import annotations

from pathlib import Path

from bertkit.inference.model_fingerprint import model_fingerprint


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


def test_a_module_or_route_folder_s_weights_are_covered(tmp_path: Path) -> None:
    """A sentence-transformers Dense layer (modules.json) or a Router route (router_config.json)
    keeps its own weights one level down: retraining it must change the fingerprint; weights in
    a folder no module names (e.g. a trainer's checkpoint-500/) are left out."""
    folder = _folder(tmp_path / "m")
    (folder / "2_Dense").mkdir()
    (folder / "2_Dense" / "model.safetensors").write_bytes(b"dense")
    (folder / "query_0_Transformer").mkdir()
    (folder / "query_0_Transformer" / "model.safetensors").write_bytes(b"query")
    (folder / "checkpoint-500").mkdir()
    (folder / "checkpoint-500" / "model.safetensors").write_bytes(b"old")
    (folder / "modules.json").write_text(
        '[{"idx": 0, "name": "0", "path": "", "type": "x.Transformer"},'
        ' {"idx": 1, "name": "1", "path": "2_Dense", "type": "x.Dense"}]'
    )
    (folder / "router_config.json").write_text('{"types": {"query_0_Transformer": "x"}}')
    before = model_fingerprint(folder)
    assert before["files"] == 7  # 4 top-level, 1_Pooling/config.json, the 2 modules' weights
    (folder / "checkpoint-500" / "model.safetensors").write_bytes(b"new")
    assert model_fingerprint(folder) == before
    for weights in ("2_Dense", "query_0_Transformer"):
        (folder / weights / "model.safetensors").write_bytes(b"retrained")
        after = model_fingerprint(folder)
        assert after["sha256"] != before["sha256"] and after["files"] == before["files"]
        before = after
