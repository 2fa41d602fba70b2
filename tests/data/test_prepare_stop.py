"""A rank 0 stopped by SIGTERM while it waits for its peers (torchrun's agent stopping the other
ranks once one has failed) leaves no staging folder behind, and a work folder guarded by
:func:`bertkit.staging.removed_if_stopped` goes with a SIGTERM while other handlers come back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from bertkit.staging import removed_if_stopped

FIX = Path(__file__).resolve().parents[1] / "fixtures"

RANK_ZERO = """
import sys, time
from bertkit.data.corpus import CorpusOptions
from bertkit.data.prepare import PrepareSettings, prepare_pretraining
from bertkit.data.pretraining import InstanceConfig

calls = []

def share(obj):  # two ranks' collective: the second call waits for a peer that never comes
    calls.append(obj)
    if len(calls) == 2:
        print("waiting", flush=True)
        time.sleep(120)
    return [obj, obj]

settings = PrepareSettings(
    instance=InstanceConfig(max_seq_length=32, dupe_factor=1),
    corpus=CorpusOptions(text_field="body"),
)
prepare_pretraining(
    [sys.argv[1]], sys.argv[2], sys.argv[3], settings,
    show_progress=False, rank=0, world=2, share=share,
)
"""


def test_rank_zero_stopped_while_waiting_for_its_peers_removes_its_staging(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-c", RANK_ZERO, str(FIX / "pt_wiki.txt"), str(FIX / "pt_vocab.txt")]
    proc = subprocess.Popen(
        [*argv, str(tmp_path / "out")], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "waiting"
        staged = [p.name for p in tmp_path.iterdir()]
        assert len(staged) == 1 and staged[0].startswith(".out.partial-")  # shards written
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        proc.kill()
    assert list(tmp_path.iterdir()) == []  # no staging, no output


def test_a_guarded_folder_goes_with_a_sigterm_and_the_old_handler_comes_back(tmp_path) -> None:
    script = textwrap.dedent(
        """
        import os, signal, sys, time
        from pathlib import Path
        from bertkit.staging import removed_if_stopped
        work = Path(sys.argv[1])
        work.mkdir()
        (work / "shard-0.bin").write_bytes(b"x")
        with removed_if_stopped(work):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "work")], env=env, timeout=60
    )
    assert run.returncode == 143 and not (tmp_path / "work").exists()
    before = signal.getsignal(signal.SIGTERM)
    with removed_if_stopped(tmp_path / "other"):
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
