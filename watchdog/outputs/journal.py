"""journald's native protocol: entries whose fields `journalctl FIELD=value` can filter (SPEC §9).

A boundary module, like the probes: it alone speaks to the journal socket. Lines on stdout reach
the journal too, but only as MESSAGE text, which `journalctl WATCHDOG_EVENT=child_spawned` cannot
filter; the native protocol sends each field as a field. See systemd.journal-fields(7) and
https://systemd.io/JOURNAL_NATIVE_PROTOCOL/ for the wire format used below.
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import os
import re
import socket
import struct
from collections.abc import Mapping

__all__ = ["JournalSender", "field_name", "journal_stream_active"]

DEFAULT_SOCKET_PATH = "/run/systemd/journal/socket"

# journald silently drops fields whose names break these rules (and, with a newline in a plain
# value, the whole entry), so names are checked here rather than trusted.
_FIELD_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")

# Errors after which sd_journal_sendv(3) retries through a memfd: the entry is larger than one
# datagram may be (the limit is the socket's send buffer, about 208 KiB by default).
_TOO_LARGE = frozenset({errno.EMSGSIZE, errno.ENOBUFS})

# journald maps an unsealed memfd only from root; a fully sealed one from anybody.
_ALL_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def journal_stream_active() -> bool:
    """True when stderr or stdout is connected to the journal (systemd.exec(5), $JOURNAL_STREAM).

    systemd sets JOURNAL_STREAM to "<st_dev>:<st_ino>" of the stream it connected; comparing
    with our own descriptors tells an inherited, stale variable (a shell started from the
    service, output redirected to a file) from a live journal connection.
    """
    expected = os.environ.get("JOURNAL_STREAM", "")
    if not expected:
        return False
    for fd in (2, 1):
        try:
            st = os.fstat(fd)
        except OSError:
            continue  # closed descriptor: it is not the journal
        if expected == f"{st.st_dev}:{st.st_ino}":
            return True
    return False


def field_name(key: str) -> str | None:
    """The journal field name for a log key ("child_pid" -> "CHILD_PID"), or None if invalid.

    Valid names are ASCII uppercase letters, digits and "_", do not start with "_" (reserved
    for trusted fields journald adds itself) or a digit, and are at most 64 characters long.
    """
    if not key.isascii():
        return None  # str.upper() would turn some non-ASCII letters into ASCII ones ("ﬀ" -> "FF")
    name = key.upper()
    return name if _FIELD_NAME.fullmatch(name) else None


def _value_bytes(value: object) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    text = value if isinstance(value, str) else str(value)
    # backslashreplace only changes strings that strict UTF-8 refuses (lone surrogates).
    return text.encode("utf-8", "backslashreplace")


def encode_entry(fields: Mapping[str, object]) -> bytes:
    """One journal entry in the native wire format; keys that are not valid names are skipped.

    A value containing a newline uses the binary form (name, newline, little-endian u64 length,
    bytes, newline): sent as a plain KEY=value line, journald drops the whole entry.
    """
    parts: list[bytes] = []
    for key, value in fields.items():
        name = field_name(key)
        if name is None or value is None:
            continue
        data = _value_bytes(value)
        if b"\n" in data:
            parts.append(name.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n")
        else:
            parts.append(name.encode() + b"=" + data + b"\n")
    return b"".join(parts)


class JournalSender:
    """Sends entries to journald over its native datagram socket; never raises, never blocks."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET_PATH) -> None:
        self._path = socket_path
        self._sock: socket.socket | None = None
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        except OSError:
            return  # send() reports False and the caller logs to stdout instead
        # A journald that cannot keep up must not stall the daemon's event loop: the entry is
        # reported unsent and the caller falls back to stdout, which journald also reads.
        sock.setblocking(False)
        self._sock = sock

    def send(self, fields: Mapping[str, object]) -> bool:
        """Send one entry; True when journald accepted the datagram, False on any failure."""
        if self._sock is None:
            return False
        try:
            data = encode_entry(fields)
        except Exception:  # a value whose __str__ raises: logging must never crash the daemon
            return False
        if not data:
            return False
        try:
            self._sock.sendto(data, self._path)
        except OSError as exc:
            if exc.errno in _TOO_LARGE:
                return self._send_via_memfd(data)
            return False  # includes BlockingIOError: journald's queue is full
        return True

    def close(self) -> None:
        """Release the socket; later sends return False."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _send_via_memfd(self, data: bytes) -> bool:
        """Pass an entry too large for a datagram as a memfd (sd_journal_sendv(3) does the same)."""
        assert self._sock is not None
        try:
            fd = os.memfd_create("journal-entry", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        except OSError:
            return False
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            with contextlib.suppress(OSError):
                # Root's unsealed memfd is accepted too; sealing makes a non-root daemon work.
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _ALL_SEALS)
            # Not socket.send_fds(): it ignores its address argument (CPython gh-107898), and
            # this socket is not connected (journald may restart; each send names its socket).
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
            self._sock.sendmsg([b""], rights, 0, self._path)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True
