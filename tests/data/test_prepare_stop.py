"""A rank 0 stopped by SIGTERM while it waits for its peers (torchrun's agent stopping the other
ranks once one has failed) leaves no staging folder behind; a work folder guarded by
:func:`bertkit.staging.removed_unless_finished` goes with an error, a SIGTERM or the watchdog's
hard exit, stays when its block finishes, and other SIGTERM handlers come back after it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bertkit.staging import remove_guarded, removed_unless_finished

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
        from bertkit.staging import removed_unless_finished
        work = Path(sys.argv[1])
        work.mkdir()
        (work / "shard-0.bin").write_bytes(b"x")
        with removed_unless_finished(work):
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
    with removed_unless_finished(tmp_path / "other"):
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_guarded_folder_goes_with_an_error_and_stays_when_the_block_finishes(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "shard-0.bin").write_bytes(b"x")
    with pytest.raises(KeyboardInterrupt), removed_unless_finished(work):
        raise KeyboardInterrupt  # any exception, not only Exception's subclasses
    assert not work.exists()
    work.mkdir()
    with removed_unless_finished(work):
        (work / "shard-0.bin").write_bytes(b"x")
    assert (work / "shard-0.bin").read_bytes() == b"x"


def test_remove_guarded_removes_only_the_folders_guarded_now(tmp_path) -> None:
    guarded, done = tmp_path / "guarded", tmp_path / "done"
    guarded.mkdir()
    done.mkdir()
    with removed_unless_finished(done):
        pass
    with removed_unless_finished(guarded):
        remove_guarded()
        assert not guarded.exists()
    assert done.exists()


STUCK_RANK = """
import sys, threading, time
from pathlib import Path
from bertkit.staging import removed_unless_finished
from bertkit.training.abort import Comm, watch

class Store:  # another rank has reported its failure
    def check(self, keys): return True
    def get(self, key): return b"rank 1 failed in preparing its files at step 0: bad.jsonl"
    def set(self, key, value): pass

work = Path(sys.argv[1])
work.mkdir()
(work / "shard-0.bin").write_bytes(b"x")
comm = Comm(store=Store(), rank=0, world=2, timeout=1.0, endpoint="127.0.0.1:0")
with removed_unless_finished(work):
    threading.Thread(target=watch, args=(comm, comm.store), daemon=True).start()
    time.sleep(60)  # stuck in a collective: never marks the failure handled
"""


def test_a_stuck_rank_ended_by_its_watchdog_removes_its_guarded_folder(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(
        [sys.executable, "-c", STUCK_RANK, str(tmp_path / "work")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1, run.stderr
    assert "stopping rank 0 (start-up at step 0, not responding): rank 1 failed" in run.stderr
    assert list(tmp_path.iterdir()) == []


HUNG_CLEAN_UP = """
import sys, time
from pathlib import Path
from bertkit.staging import removed_unless_finished
from bertkit.training.abort import end_after

work = Path(sys.argv[1])
work.mkdir()
with removed_unless_finished(work):
    end_after(float(sys.argv[2]))  # as a rank does once its failure is handled
    time.sleep(float(sys.argv[3]))  # its clean-up: hung (60 s) or done in time (0 s)
"""


def test_a_rank_whose_clean_up_hangs_after_its_failure_is_ended_without_its_folder(
    tmp_path,
) -> None:
    """The bound on a failed rank's exit: a timer ends it, with an error line and every
    thread's stack, and removes its guarded folder first (faulthandler's own exit, the only
    bound before, left it). A process that exits in time is not held up by the timer."""

    def run(name: str, after: str, clean_up: str, timeout: int) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-c", HUNG_CLEAN_UP, str(tmp_path / name), after, clean_up]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)

    hung = run("hung", "0.5", "60", timeout=60)
    assert hung.returncode == 1, hung.stderr
    assert "error: still running 0.5 s after its failure was handled" in hung.stderr
    assert 'File "<string>", line 11 in <module>' in hung.stderr  # the stuck main thread
    assert not (tmp_path / "hung").exists()
    done = run("done", "30", "0", timeout=20)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "done").exists()
