"""journald native protocol (watchdog/outputs/eventlog.py) against a real AF_UNIX datagram
socket."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchdog.outputs.eventlog import JournalSender, field_name, journal_stream_active

ALL_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def decode_entry(data: bytes) -> list[tuple[str, bytes]]:
    """Parse the native format as journald does: KEY=value, or KEY\\n<u64 LE length><bytes>\\n."""
    fields: list[tuple[str, bytes]] = []
    pos = 0
    while pos < len(data):
        end = data.index(b"\n", pos)
        line = data[pos:end]
        if b"=" in line:
            key, value = line.split(b"=", 1)
            fields.append((key.decode("ascii"), value))
            pos = end + 1
            continue
        (size,) = struct.unpack("<Q", data[end + 1 : end + 9])
        value = data[end + 9 : end + 9 + size]
        assert data[end + 9 + size : end + 10 + size] == b"\n", "no newline after binary field"
        fields.append((line.decode("ascii"), value))
        pos = end + 10 + size
    return fields


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A stand-in journald: a bound datagram socket in a temporary directory."""
    path = str(tmp_path / "journal.socket")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    server.settimeout(5)
    yield server, path
    server.close()


def receive(server: socket.socket) -> tuple[list[tuple[str, bytes]], list[int]]:
    """One datagram from the stand-in, decoded, plus any descriptors passed with it."""
    data, fds, _flags, _addr = socket.recv_fds(server, 1 << 20, 4)
    return decode_entry(data), fds


def test_field_name_uppercases_log_keys() -> None:
    """A snake_case log key becomes the uppercase journal field name."""
    assert field_name("child_pid") == "CHILD_PID"
    assert field_name("WATCHDOG_EVENT") == "WATCHDOG_EVENT"
    assert field_name("gpu0") == "GPU0"


@pytest.mark.parametrize(
    "key", ["", "_pid", "_SYSTEMD_UNIT", "0gpu", "gpu-0", "exit code", "key=x", "gpü", "ﬀ"]
)
def test_field_name_rejects_names_journald_would_drop(key: str) -> None:
    """Keys journald would drop (reserved, leading digit, punctuation, non-ASCII) map to None."""
    assert field_name(key) is None


def test_field_name_length_limit_is_64() -> None:
    """A 64-character name is valid and a 65-character one is not."""
    assert field_name("a" * 64) == "A" * 64
    assert field_name("a" * 65) is None


@given(st.text(max_size=80))
def test_field_name_only_returns_valid_names(key: str) -> None:
    """Whatever the key, the result is None or a name that satisfies journald's rules."""
    name = field_name(key)
    if name is not None:
        assert 1 <= len(name) <= 64
        assert name[0].isalpha() and name.isascii()
        assert all(c.isupper() or c.isdigit() or c == "_" for c in name)


def _stream_active_in_child(tmp_path: Path, journal_stream: str | None) -> bool:
    """Run journal_stream_active() in a child whose stdout and stderr are two distinct files."""
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    if journal_stream is not None:
        env["JOURNAL_STREAM"] = journal_stream
    code = (
        "import sys, watchdog.outputs.eventlog as j;"
        " sys.exit(0 if j.journal_stream_active() else 1)"
    )
    with open(tmp_path / "out", "ab") as out, open(tmp_path / "err", "ab") as err:
        done = subprocess.run(
            [sys.executable, "-c", code], stdout=out, stderr=err, env=env, timeout=30, check=False
        )
    assert done.returncode in (0, 1), (tmp_path / "err").read_text()
    return done.returncode == 0


def _dev_ino(path: Path) -> str:
    st_ = path.stat()
    return f"{st_.st_dev}:{st_.st_ino}"


def test_journal_stream_matches_stderr_or_stdout(tmp_path: Path) -> None:
    """JOURNAL_STREAM naming the device:inode of stderr, or of stdout, means the journal is live."""
    (tmp_path / "out").touch()
    (tmp_path / "err").touch()
    assert _stream_active_in_child(tmp_path, _dev_ino(tmp_path / "err"))
    assert _stream_active_in_child(tmp_path, _dev_ino(tmp_path / "out"))


def test_journal_stream_stale_or_missing_is_inactive(tmp_path: Path) -> None:
    """An inherited JOURNAL_STREAM that names another file, or none at all, is not the journal."""
    (tmp_path / "other").touch()
    assert not _stream_active_in_child(tmp_path, _dev_ino(tmp_path / "other"))
    assert not _stream_active_in_child(tmp_path, None)
    assert not _stream_active_in_child(tmp_path, "")


def test_journal_stream_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this very process, the variable is honoured only while it names fd 2 or fd 1."""
    st_ = os.fstat(2)
    monkeypatch.setenv("JOURNAL_STREAM", f"{st_.st_dev}:{st_.st_ino}")
    assert journal_stream_active()
    monkeypatch.setenv("JOURNAL_STREAM", "0:0")
    assert not journal_stream_active()


def test_send_plain_fields(journal: tuple[socket.socket, str]) -> None:
    """Fields arrive as KEY=value lines with uppercase names and stringified values."""
    server, path = journal
    sender = JournalSender(path)
    ok = sender.send(
        {"message": "child spawned", "watchdog_event": "child_spawned", "child_pid": 4182, "x": 1.5}
    )
    assert ok
    fields, fds = receive(server)
    assert fds == []
    assert fields == [
        ("MESSAGE", b"child spawned"),
        ("WATCHDOG_EVENT", b"child_spawned"),
        ("CHILD_PID", b"4182"),
        ("X", b"1.5"),
    ]
    sender.close()


def test_send_newline_value_uses_binary_form(journal: tuple[socket.socket, str]) -> None:
    """A value with newlines is length-prefixed, so journald keeps the entry rather than drop it."""
    server, path = journal
    sender = JournalSender(path)
    traceback = "Traceback (most recent call last):\n  File x\nValueError: boom\n"
    assert sender.send({"MESSAGE": traceback, "JOB": "dflash"})
    data = server.recv(1 << 20)
    assert data.startswith(b"MESSAGE\n" + struct.pack("<Q", len(traceback)))
    assert decode_entry(data) == [("MESSAGE", traceback.encode()), ("JOB", b"dflash")]
    sender.close()


def test_send_encodes_utf8(journal: tuple[socket.socket, str]) -> None:
    """Text values are sent as UTF-8, including characters outside Latin-1."""
    server, path = journal
    sender = JournalSender(path)
    assert sender.send({"STATUS": "running pid 4 · 9,012 tok/s · ✓", "RAW": b"\xff\x00"})
    fields, _ = receive(server)
    assert fields == [("STATUS", "running pid 4 · 9,012 tok/s · ✓".encode()), ("RAW", b"\xff\x00")]
    sender.close()


def test_send_skips_invalid_names_and_none(journal: tuple[socket.socket, str]) -> None:
    """Invalid field names and None values are left out; the rest of the entry is still sent."""
    server, path = journal
    sender = JournalSender(path)
    assert sender.send({"_PID": 1, "bad-key": "x", "reason": None, "event": "fatal"})
    fields, _ = receive(server)
    assert fields == [("EVENT", b"fatal")]
    sender.close()


def test_send_large_entry_through_memfd(journal: tuple[socket.socket, str]) -> None:
    """An entry too large for a datagram goes as a sealed memfd passed with SCM_RIGHTS."""
    server, path = journal
    sender = JournalSender(path)
    big = ("0123456789abcdef" * 20_000)[:300_000]
    assert sender.send({"MESSAGE": big, "WATCHDOG_EVENT": "incident_saved"})
    data, fds, _flags, _addr = socket.recv_fds(server, 1 << 20, 4)
    assert data == b""
    assert len(fds) == 1
    try:
        fd = fds[0]
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & ALL_SEALS == ALL_SEALS
        size = os.fstat(fd).st_size
        assert decode_entry(os.pread(fd, size, 0)) == [
            ("MESSAGE", big.encode()),
            ("WATCHDOG_EVENT", b"incident_saved"),
        ]
    finally:
        for fd in fds:
            os.close(fd)
    sender.close()


def test_send_without_journal_returns_false(tmp_path: Path) -> None:
    """With no socket at the path, send() reports failure instead of raising."""
    sender = JournalSender(str(tmp_path / "missing.socket"))
    assert sender.send({"MESSAGE": "hello"}) is False
    assert sender.send({"MESSAGE": "x" * 300_000}) is False
    sender.close()


def test_send_reaches_a_restarted_journal(tmp_path: Path) -> None:
    """The socket is not connected, so a journald that comes back at the same path gets entries."""
    path = str(tmp_path / "journal.socket")
    sender = JournalSender(path)
    assert sender.send({"MESSAGE": "before"}) is False
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        server.bind(path)
        server.settimeout(5)
        assert sender.send({"MESSAGE": "after"})
        assert decode_entry(server.recv(4096)) == [("MESSAGE", b"after")]
    finally:
        server.close()
        sender.close()


def test_send_that_would_block_returns_false(journal: tuple[socket.socket, str]) -> None:
    """When the journal's queue is full, send() returns False at once instead of blocking."""
    _server, path = journal
    sender = JournalSender(path)
    results = [sender.send({"MESSAGE": "m" * 1000}) for _ in range(20_000)]
    assert results[0] is True
    assert False in results, "the receive queue never filled up"
    sender.close()


def test_send_with_unprintable_value_returns_false(journal: tuple[socket.socket, str]) -> None:
    """A value whose str() raises makes send() return False rather than propagate."""

    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    _server, path = journal
    sender = JournalSender(path)
    assert sender.send({"MESSAGE": Broken()}) is False
    assert sender.send({}) is False
    sender.close()


def test_send_after_close_returns_false(journal: tuple[socket.socket, str]) -> None:
    """A closed sender reports every send as failed."""
    _server, path = journal
    sender = JournalSender(path)
    sender.close()
    assert sender.send({"MESSAGE": "late"}) is False
