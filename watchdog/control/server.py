"""The control socket (SPEC §8): newline-delimited JSON over a Unix stream socket.

Safety: the socket is 0660 (group `control.group`) in a 0750 folder; every mutating command is
checked against the peer's credentials (SO_PEERCRED and SO_PEERGROUPS: root or
`control.operator_group`) and logged with the caller's uid (`command_received`). A request line is
capped, a silent connection is closed, a slow reader is dropped, junk gets an error: no client can
stall the loop, the probes or the watchdog pings. Root always gets a connection slot.

What the commands do (start, stop, restart, wait_healthy, reload, pause, resume, status) lives in
commands.py, who may run them and the socket file in socketfile.py; this module serves
the socket and streams `events` and `logs` (read by progress/logfile.py, on a bounded worker: a
log on a hung mount answers `log_unreadable`, it does not hold the client or a thread pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import grp
import os
import socket
from typing import TYPE_CHECKING, Any

from watchdog.blocking import BoundedWorker
from watchdog.clock import SYSTEM, Clock
from watchdog.control import socketfile
from watchdog.control.backend import Call, ClientGone, CommandError, LogUnreadable, Served
from watchdog.control.commands import Operations
from watchdog.control.socketfile import Peer, may_operate, peer_credentials
from watchdog.core.protocol import wire as protocol
from watchdog.core.ratelimit import RateLimit
from watchdog.progress import logfile

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

# a bind refused for room in the socket's folder: said once, tried again each tick
BIND_RETRIED = frozenset({errno.ENOSPC, errno.EDQUOT})
ENDS_THE_RUN = frozenset({"restart", "stop"})  # a save under way is worth a word before these
IDLE_TIMEOUT_S = 30.0  # a request line must arrive within this (also between requests)
WRITE_TIMEOUT_S = 10.0  # a client that reads slower than this is dropped
MAX_CONNECTIONS = 256  # for peers other than root
ROOT_RESERVE = 32  # slots only root may use: an operator can always get in
JUNK_DRAIN_S = 1.0  # after "too large", swallow the rest so the client can read its error
FOLLOW_WAKE_S = 1.0  # a follower notices a client that went away within this
FOLLOW_POLL_S = 0.25  # `logs --follow` looks at the file this often


class ControlServer:
    def __init__(self, daemon: Served, clock: Clock = SYSTEM) -> None:
        self.d = daemon
        self._clock = clock  # the shell's one clock (clock.py): each call's, the rate limit's
        self.path = daemon.cfg.control.socket
        self._server: asyncio.AbstractServer | None = None
        self._conns: dict[asyncio.Task[Any], Peer] = {}
        self._ident: tuple[int, int] | None = None
        self._listen_fd: int | None = None  # carried across a reexec
        # Reads of the job's log (`logs`, `status`'s tail) run here: a log on a hung network
        # filesystem wedges this one thread, and later reads are answered "hung" at once.
        self._files = BoundedWorker("control-logs")
        self._ops = Operations(daemon, self._files)
        # Denied commands are logged with the caller's uid, but a reader must not be able to
        # flush the event history with them: a burst per uid, then a count (issue 15).
        self._denied_log = RateLimit(burst=10, window_s=60.0)
        self._rebinding = False  # a bind of a deleted socket's path is under way
        self._rebind_failed = False  # said once until a bind works again
        self._unbound = False  # the bind at start was refused for room: tried again each tick

    async def start(self, listening_fd: int | None = None) -> None:
        """Bind the socket, or serve on the listener carried across a re-exec (`listening_fd`:
        clients that connected meanwhile wait in its backlog)."""
        cfg = self.d.cfg.control
        if listening_fd is not None:
            sock = socket.socket(fileno=listening_fd)
            os.set_inheritable(listening_fd, False)
        else:
            gid = grp.getgrnam(cfg.group).gr_gid if cfg.group else -1
            socketfile.prepare_folder(os.path.dirname(self.path) or ".", gid)
            socketfile.remove_stale_socket(self.path)
            sock = socketfile.bind(self.path, gid)
        self._listen_fd = sock.fileno()
        st = os.stat(self.path)
        self._ident = (st.st_dev, st.st_ino)
        self._server = await asyncio.start_unix_server(
            self._serve, sock=sock, limit=protocol.MAX_LINE_BYTES, backlog=128
        )

    async def start_or_retry(self, listening_fd: int | None = None) -> None:
        """`start`, except that a socket folder out of inodes or space (ENOSPC, EDQUOT: a full
        /run) is said in one line and the bind tried again each tick: the job is supervised
        meanwhile. Exiting instead would leave nothing supervised under the shipped unit
        (Restart=on-failure into its start limit; 78 is never restarted: systemd/)."""
        try:
            await self.start(listening_fd)
        except OSError as e:
            if listening_fd is not None or e.errno not in BIND_RETRIED:
                raise
            error = f"{errno.errorcode[e.errno]}: {e.strerror}"
            self.d.emit("control_socket_bind_failed", path=self.path, error=error)
            self._unbound = self._rebind_failed = True  # the retries' failures go unsaid

    def recheck(self, spawn: Callable[[Coroutine[Any, Any, None]], object]) -> None:
        """The socket deleted or replaced under the daemon: bound again, in a task of `spawn`."""
        if (reason := self.socket_gone()) is not None:
            spawn(self.rebind(reason))

    def socket_gone(self) -> str | None:
        """One os.stat of the socket's path (each tick, and on SIGHUP): "gone" or "replaced"
        when it is no longer the socket we bound and serve (`rebind` is then due), else None."""
        if self._unbound and not self._rebinding:
            self._rebinding = True
            return "unbound"
        server = self._server
        if server is None or self._ident is None or not server.is_serving() or self._rebinding:
            return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            reason = "gone"
        except OSError:
            return None
        else:
            if (st.st_dev, st.st_ino) == self._ident or self._rebind_failed:
                return None  # ours; or a replacement we could not take, left until it is gone
            reason = "replaced"
        self._rebinding = True
        return reason

    async def rebind(self, reason: str) -> None:
        """Bind the socket's path again (deleted under the daemon: `rm -rf /run/train-watchdog/*`),
        so watchdogctl reaches it without a restart of the daemon, which would end the job
        under the shipped unit. Connections under way go on; the old listener is closed."""
        old = self._server
        try:
            await self.start()
        except (OSError, RuntimeError) as e:  # a live socket of somebody else's, a folder
            if not self._rebind_failed:
                self.d.emit("control_socket_rebind_failed", path=self.path, error=str(e))
            self._rebind_failed = True
            return
        finally:
            self._rebinding = False
        self._rebind_failed = self._unbound = False
        if old is not None:
            old.close()
        self.d.emit("control_socket_recreated", path=self.path, reason=reason)

    async def pause_for_handover(self, timeout_s: float) -> int:
        """Stop accepting (the listener stays open through a duplicate: new clients wait in its
        backlog for the next code) and give the requests under way up to `timeout_s` to be
        answered, so no client connected to the old code is cut off by the exec. Returns the
        duplicate; the caller's own connection (the reexec's) stays open."""
        assert self._server is not None and self._listen_fd is not None
        fd = os.dup(self._listen_fd)
        self._server.close()
        me = asyncio.current_task()
        deadline = self._clock.monotonic() + timeout_s
        await asyncio.sleep(0.005)  # connections accepted just now get their task started
        while any(t is not me for t in self._conns) and self._clock.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return fd

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        self._files.close()
        with contextlib.suppress(OSError):
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._ident:  # never remove a successor's socket
                os.unlink(self.path)

    # ------------------------------------------------------------------ connections

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            peer = peer_credentials(writer.get_extra_info("socket"))
            if not self._admit(peer):
                await _send(writer, protocol.error_reply(None, "busy", "too many connections"))
                return
            self._conns[task] = peer
            await self._session(reader, writer, peer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, ClientGone):
            pass  # the client went away or dawdled: nobody is left to answer
        except Exception as e:  # a bug here must not end the daemon: report it, drop the client
            self.d.emit("internal_error_caught", where="control", error=f"{type(e).__name__}: {e}")
        finally:
            self._conns.pop(task, None)
            if writer.transport.get_write_buffer_size():
                writer.transport.abort()  # a client too slow to read its reply keeps nothing here
            else:
                writer.close()

    def _admit(self, peer: Peer) -> bool:
        if len(self._conns) >= MAX_CONNECTIONS + ROOT_RESERVE:
            return False
        return peer.uid == 0 or sum(p.uid != 0 for p in self._conns.values()) < MAX_CONNECTIONS

    async def _session(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Peer
    ) -> None:
        while True:
            try:
                line = await asyncio.wait_for(reader.readuntil(b"\n"), IDLE_TIMEOUT_S)
            except asyncio.LimitOverrunError:
                msg = f"request over {protocol.MAX_LINE_BYTES} bytes"
                await _send(writer, protocol.error_reply(None, "too_large", msg))
                await _discard(reader)
                return
            except TimeoutError:
                msg = f"no complete request in {IDLE_TIMEOUT_S:g} s"
                await _send(writer, protocol.error_reply(None, "idle_timeout", msg))
                return
            except asyncio.IncompleteReadError:
                return  # end of stream (a last line without its newline is not a request)
            try:
                req = protocol.decode_request(line)
            except protocol.ProtocolError as e:
                await _send(writer, protocol.error_reply(e.req_id, e.type, e.message))
                continue
            conn = writer.get_extra_info("socket")
            if not await self._handle(
                Call(req, peer, reader, self.d, self._clock, conn=conn), writer
            ):
                return

    async def _handle(self, call: Call, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is done (after a stream)."""
        spec = protocol.COMMANDS[call.req.cmd]
        if spec.mutating:
            if not await self._authorised(call, writer):
                return True
            call.queue = self.d.events.subscribe()
        try:
            if spec.streams:
                stream = self._stream_events if call.req.cmd == "events" else self._stream_log
                await stream(call, writer)
                return False
            await _send(writer, await self._reply(call))
            return True
        finally:
            if call.queue is not None:
                self.d.events.unsubscribe(call.queue)

    async def _authorised(self, call: Call, writer: asyncio.StreamWriter) -> bool:
        """A mutating command: logged with the caller's uid; False (answered) when refused."""
        req, peer = call.req, call.peer
        allowed = may_operate(peer, self.d.cfg.control.operator_group)
        suppressed = 0 if allowed else self._denied_log.admit(peer.uid, self._clock.monotonic())
        # SPEC §16: `restart --at-checkpoint` waits the save out: no warning about it
        ends = req.cmd in ENDS_THE_RUN and not req.args.get("at_checkpoint")
        during = self._saving() if allowed and ends else None
        if during is not None:
            call.note = "note: a checkpoint save was under way; it may not be complete"
        if suppressed is not None:
            self.d.emit(
                "command_received",
                cmd=req.cmd,
                uid=peer.uid,
                peer_pid=peer.pid,
                allowed=allowed,
                args=req.args or None,
                denied_suppressed=suppressed or None,
                during=during,
            )
        if not allowed:
            who = self.d.cfg.control.operator_group
            msg = f"uid {peer.uid} may not {req.cmd}: only root" + (
                f" and members of group {who} (control.operator_group)" if who else ""
            )
            await _send(writer, protocol.error_reply(req.id, "permission_denied", msg))
        return allowed

    def _saving(self) -> str | None:
        """ "checkpoint_save" when the job's run is in a save now (its log said a save began and
        no step has followed: core/progress/stall_window.py), else None."""
        window = (self.d.status().get("progress") or {}).get("stall_window") or {}
        return "checkpoint_save" if window.get("phase") == "checkpoint" else None

    async def _reply(self, call: Call) -> bytes:
        """The one reply of a command that does not stream."""
        req = call.req
        try:
            return protocol.ok_reply(req.id, await self._ops.run(call))
        except CommandError as e:
            return protocol.error_reply(req.id, e.type, e.message, e.result)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            # A bug or a surprise in one command: answer it, report it, serve on.
            what = f"{type(e).__name__}: {e}"
            self.d.emit("internal_error_caught", where=f"control {req.cmd}", error=what)
            return protocol.error_reply(req.id, "internal_error", what)

    # ------------------------------------------------------------------ streams

    async def _stream_events(self, call: Call, writer: asyncio.StreamWriter) -> None:
        req = call.req
        events = self.d.events
        q = events.subscribe() if req.args.get("follow", False) else None  # before history
        try:
            history = events.history(req.args.get("n", 20))
            await _send(writer, protocol.ok_reply(req.id, {"events": history}))
            while q is not None and not call.reader.at_eof():
                try:
                    batch = [await asyncio.wait_for(q.get(), FOLLOW_WAKE_S)]
                except TimeoutError:
                    continue  # nothing new: look whether the client is still there
                while not q.empty():
                    batch.append(q.get_nowait())
                if dropped := events.take_dropped(q):  # never lose events silently
                    batch.append(_dropped_record(dropped, self._clock))
                await _send(writer, protocol.ok_reply(req.id, {"events": batch}))
        finally:
            if q is not None:
                events.unsubscribe(q)

    async def _stream_log(self, call: Call, writer: asyncio.StreamWriter) -> None:
        """The job's log as the job writes it (docs/logrotate.md): the current run's file
        whatever its name now, then the next run's once one starts; by path without a run."""
        req = call.req
        path, log = self.d.cfg.job.log_file, self.d.job.log
        tail = logfile.LogTail(path, fd=None if log is None else log.dup())
        try:
            lines = await self._ops.read_log(lambda: tail.start(req.args.get("n", 50)))
            await _send(writer, protocol.ok_reply(req.id, {"lines": lines}))
            while req.args.get("follow", False) and not call.reader.at_eof():
                await asyncio.sleep(FOLLOW_POLL_S)  # a follower's pace, not a synchronisation
                if (now := self.d.job.log) is not log and now is not None:
                    log = now
                    if (fd := now.dup()) is not None:
                        tail.follow(fd)  # a new run: its file, once the old one is drained
                new = await self._ops.read_log(tail.poll)
                if new:
                    await _send(writer, protocol.ok_reply(req.id, {"lines": new}))
        except LogUnreadable as e:
            await _send(writer, protocol.error_reply(req.id, "log_unreadable", str(e)))
        finally:
            self._files.when_idle(tail.close)  # never under a read still stuck on its fd


def _dropped_record(n: int, clock: Clock) -> dict[str, Any]:
    """Said in the stream where a follower that fell behind lost events."""
    return {
        "ts": clock.utc().isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "event": "events_dropped",
        "count": n,
        "detail": "this follower fell behind; `watchdogctl events -n 1000` has the history",
    }


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)


async def _discard(reader: asyncio.StreamReader) -> None:
    """Swallow what the client still sends (briefly), so closing does not reset the connection
    before it has read our error."""
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(JUNK_DRAIN_S):
            while await reader.read(1 << 16):
                pass
