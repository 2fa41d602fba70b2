"""bertkit.input_files: what an input path must be, in one wording whichever command reads it;
here a UNIX socket, which no reader can open (it was "No such device or address")."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from bertkit.errors import InputError
from bertkit.input_files import require_file
from bertkit.io import read_text_lines


@pytest.fixture
def sock(tmp_path: Path) -> Iterator[Path]:
    """A listening UNIX socket in ``tmp_path`` (a short name: a socket path has ~107 bytes)."""
    path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    try:
        yield path
    finally:
        server.close()


@pytest.mark.parametrize("stream", [False, True])
def test_a_socket_is_refused_as_no_file(sock: Path, stream: bool) -> None:
    """Streamed or not: a FIFO is read where the input is streamed, a socket never can be."""
    with pytest.raises(InputError, match=rf"^{re.escape(str(sock))}: is a socket, not a file$"):
        require_file(sock, stream=stream)


def test_a_reader_that_opens_a_socket_says_so(sock: Path) -> None:
    with pytest.raises(InputError, match=rf"^{re.escape(str(sock))}: is a socket, not a file$"):
        next(read_text_lines(sock))


@pytest.mark.parametrize("command", ["tokenize", "embed", "prepare-pretraining"])
def test_commands_name_the_socket(sock: Path, tmp_path: Path, capsys, command: str) -> None:
    from bertkit.cli.main import main

    fixtures = Path(__file__).parent / "fixtures"
    argv = {
        "tokenize": ["tokenize", "--vocab", str(fixtures / "tok_vocab.txt"), "--input", str(sock)],
        "embed": ["embed", "--model", str(tmp_path), "--input", str(sock)],
        "prepare-pretraining": [
            "prepare-pretraining", "--vocab", str(fixtures / "pt_vocab.txt"), "--input", str(sock),
        ],
    }[command]  # fmt: skip
    assert main([*argv, "--output", str(tmp_path / "out.npy")]) != 0
    assert f"{sock}: is a socket, not a file" in capsys.readouterr().err
