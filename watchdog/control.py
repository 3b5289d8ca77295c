"""The control socket (SPEC §8): newline-delimited JSON over a Unix stream socket.

Safety: the socket is 0660 in a 0750 folder (group `control.group`); every mutating command is
checked against the peer's credentials (SO_PEERCRED: root or `control.operator_group`) and logged
with the caller's uid. A request line is capped, an idle connection is closed, a slow reader is
dropped: no client can stall the loop, the probes or the watchdog pings.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import os
import pwd
import socket
import stat
import struct
import time
from typing import TYPE_CHECKING, Any

from watchdog import policy, protocol

if TYPE_CHECKING:
    from watchdog.daemon import Daemon

IDLE_TIMEOUT_S = 30.0
WRITE_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 256


class CommandError(Exception):
    def __init__(self, type_: str, message: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message
        self.result = result


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end (unix(7) SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def may_operate(uid: int, gid: int, operator_group: str | None) -> bool:
    if uid == 0 or uid == os.geteuid():
        return True
    if operator_group is None:
        return False
    try:
        want = grp.getgrnam(operator_group).gr_gid
        if gid == want:
            return True
        user = pwd.getpwuid(uid)
        return want in os.getgrouplist(user.pw_name, user.pw_gid)
    except KeyError:
        return False


class ControlServer:
    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.Task[Any]] = set()
        self.path = daemon.cfg.control.socket

    async def start(self) -> None:
        cfg = self.d.cfg.control
        folder = os.path.dirname(self.path) or "."
        if not os.path.isdir(folder):
            os.makedirs(folder, mode=0o750)
        _remove_stale_socket(self.path)
        self._server = await asyncio.start_unix_server(
            self._serve, path=self.path, limit=protocol.MAX_LINE_BYTES
        )
        gid = grp.getgrnam(cfg.group).gr_gid if cfg.group else -1
        os.chown(self.path, -1, gid)
        os.chmod(self.path, 0o660)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._conns) >= MAX_CONNECTIONS:
            writer.close()
            return
        self._conns.add(task)
        try:
            sock = writer.get_extra_info("socket")
            _, uid, gid = peer_credentials(sock)
            await self._session(reader, writer, uid, gid)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away or dawdled: nothing to answer
        finally:
            self._conns.discard(task)
            writer.close()

    async def _session(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, uid: int, gid: int
    ) -> None:
        while True:
            try:
                line = await asyncio.wait_for(reader.readuntil(b"\n"), IDLE_TIMEOUT_S)
            except asyncio.LimitOverrunError:
                await _send(writer, protocol.error_reply(None, "too_large", "request too large"))
                return
            except asyncio.IncompleteReadError:
                return
            try:
                req = protocol.decode_request(line)
            except protocol.ProtocolError as e:
                await _send(writer, protocol.error_reply(e.req_id, e.type, e.message))
                continue
            spec = protocol.COMMANDS[req.cmd]
            if spec.mutating and not may_operate(uid, gid, self.d.cfg.control.operator_group):
                await _send(
                    writer,
                    protocol.error_reply(
                        req.id, "permission_denied", f"uid {uid} may not {req.cmd}"
                    ),
                )
                continue
            if spec.mutating:
                self.d.emit("command_received", cmd=req.cmd, uid=uid, args=req.args or None)
            if spec.streams:
                await self._stream(req, writer)
                return
            try:
                reply = protocol.ok_reply(req.id, await self._run(req, uid))
            except CommandError as e:
                reply = protocol.error_reply(req.id, e.type, e.message, e.result)
            await _send(writer, reply)

    # ------------------------------------------------------------------ commands

    async def _run(self, req: protocol.Request, uid: int) -> Any:
        d = self.d
        match req.cmd:
            case "status":
                return d.status()
            case "pause" | "resume":
                self._operate(req.cmd, uid)
                return d.status()
            case "reload":
                err = d.reload()
                if err is not None:
                    raise CommandError("config_invalid", f"{err} (old config kept)")
                return {"config": d.cfg.source}
            case "stop":
                self._operate("stop", uid)
                await self._wait(
                    lambda: d.core.snapshot().state in _AT_REST, d.cfg.job.stop_timeout_s + 10
                )
                return d.status()
            case "start" | "restart":
                before = d.core.snapshot().pid
                self._operate(req.cmd, uid)
                spawned = await self._wait(lambda: _started_or_failed(d, before), _start_budget(d))
                if not spawned:
                    raise CommandError("timeout", "the job did not start in time", d.status())
                return d.status()
            case "wait_healthy":
                return await self._wait_healthy(req.args)
        raise CommandError("unknown_command", req.cmd)

    def _operate(self, cmd: str, uid: int) -> None:
        actions = self.d.dispatch(policy.OperatorCommand(cmd, uid))  # type: ignore[arg-type]
        for a in actions:
            if isinstance(a, policy.Refuse):
                raise CommandError("refused", a.message)

    async def _wait(self, pred: Any, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not pred():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await self.d.wait_changed(min(left, 1.0))
        return True

    async def _wait_healthy(self, args: dict[str, Any]) -> dict[str, Any]:
        """restart --wait: until the job started after `pid` is healthy, or why it is not."""
        d = self.d
        timeout = float(args.get("timeout", 600))
        pid = d.core.snapshot().pid
        exits_before = d.core.snapshot().restarts_total
        ok = await self._wait(lambda: _settled(d, pid, exits_before), timeout)
        snap = d.core.snapshot()
        st = d.status()
        if ok and snap.state is policy.State.RUNNING and snap.pid == pid:
            return {"healthy": True, "status": st}
        reason = _why_not_healthy(d, pid, timed_out=not ok)
        return {"healthy": False, "reason": reason, "status": st, "log_tail": d.log_tail(20)}

    async def _stream(self, req: protocol.Request, writer: asyncio.StreamWriter) -> None:
        n = int(req.args.get("n", 20))
        follow = bool(req.args.get("follow", False))
        if req.cmd == "events":
            q = self.d.events.subscribe() if follow else None
            try:
                await _send(writer, protocol.ok_reply(req.id, {"events": self.d.events.history(n)}))
                while q is not None:
                    record = await q.get()
                    await _send(writer, protocol.ok_reply(req.id, {"events": [record]}))
            finally:
                if q is not None:
                    self.d.events.unsubscribe(q)
            return
        lines = self.d.log_tail(n)
        await _send(writer, protocol.ok_reply(req.id, {"lines": lines}))
        if follow:
            await self._follow_log(req, writer)

    async def _follow_log(self, req: protocol.Request, writer: asyncio.StreamWriter) -> None:
        from watchdog.probes.progress import LogFollower

        follower = LogFollower(self.d.cfg.job.log_file, self.d.cfg.progress.pattern, start="end")
        try:
            while True:
                await asyncio.sleep(0.5)  # a follower's pace, not a synchronisation
                new = follower.poll()
                if new.last_lines:
                    await _send(writer, protocol.ok_reply(req.id, {"lines": list(new.last_lines)}))
        finally:
            follower.close()


_AT_REST = (policy.State.STOPPED, policy.State.FATAL, policy.State.BACKOFF)


def _start_budget(d: Daemon) -> float:
    c = d.cfg
    return (
        c.job.stop_timeout_s
        + c.gpus.reclaim_timeout_s
        + c.job.pre_start_timeout_s * max(1, len(c.job.pre_start))
        + 15
    )


def _started_or_failed(d: Daemon, before: int | None) -> bool:
    s = d.core.snapshot()
    return (s.pid is not None and s.pid != before) or s.state in _AT_REST


def _settled(d: Daemon, pid: int | None, restarts_before: int) -> bool:
    s = d.core.snapshot()
    if s.pid != pid or s.state in _AT_REST or s.restarts_total != restarts_before:
        return True
    return s.state in (policy.State.RUNNING, policy.State.UNHEALTHY)


def _why_not_healthy(d: Daemon, pid: int | None, *, timed_out: bool) -> str:
    s = d.core.snapshot()
    if s.pid != pid and s.last_exit is not None:
        code, sig = s.last_exit
        died = f"signal {sig}" if sig is not None else f"code {code}"
        return f"the job died during startup ({died})"
    if s.pid != pid:
        return f"the job was restarted ({s.last_reason})"
    if s.firing:
        return "unhealthy: " + ", ".join(sorted(s.firing))
    st = d.status()
    if d.gpus.expected and st["gpus"] and any(g["idle"] for g in st["gpus"]):
        return "GPUs never used: " + ", ".join(
            f"GPU {g['index']} {g['used_mib']} MiB" for g in st["gpus"] if g["idle"]
        )
    if st["progress"]["last_progress_age_s"] is None:
        return "no progress line yet"
    return "not healthy before the timeout" if timed_out else f"state {s.state.value}"


def _remove_stale_socket(path: str) -> None:
    """A socket left by a daemon that was SIGKILLed: remove it, unless somebody answers on it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise RuntimeError(f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)
        return
    except OSError:
        os.unlink(path)
        return
    finally:
        probe.close()
    raise RuntimeError(f"another watchdogd answers on {path}")


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
