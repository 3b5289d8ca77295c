"""Which code a run ran (SPEC §15 "Every run on record"): `git` in the job's folder (commit, dirty,
the sha256 of the diff against HEAD), or the sha256 of `runs.code_paths`.

BLOCKING: call it on a bounded worker (daemon/ledger.py), never on the loop. A job folder on a
dead NFS server hangs `git` (and any read) in the kernel; each git call is bounded by `timeout_s`
and a git that does not answer is killed and left to the orphan reaper, so a hung read costs the
worker's call its deadline, never a start or the loop.

git runs as `git -C DIR` so that the folder is entered by git after the exec, not by the fork's
child before it (a chdir there would hold the caller until the exec, the whole hang). The daemon
is a subreaper that reaps children on SIGCHLD (reaping.py): a child whose status we wait for
must be in WAITED_ELSEWHERE before it can exit, so it waits on its stdin (a tiny `sh` gate) until
its pid is listed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from collections.abc import Sequence
from typing import Any

from watchdog.process.reaping import WAITED_ELSEWHERE

GIT_TIMEOUT_S = 5.0  # one git call (a large repository's `status` included)
_GATE = 'read _ ; exec "$@"'  # waits until the caller closes stdin, then becomes git
MAX_CODE_FILES = 20_000  # runs.code_paths: a folder bigger than this is not hashed whole


class CodeUnreadable(Exception):
    """git did not answer in time (a hung mount), or the code paths could not be read."""


def read_code(
    cwd: str | None, code_paths: Sequence[str], timeout_s: float = GIT_TIMEOUT_S
) -> dict[str, Any] | None:
    """{commit, dirty, diff_sha} from git in `cwd`, or {sha256} of `code_paths` when they are
    set (they win: the operator named what the code is); None when neither applies."""
    if code_paths:
        return {"commit": None, "dirty": None, "diff_sha": None, "sha256": hash_paths(code_paths)}
    if cwd is None:
        return None
    head = _git(cwd, ["rev-parse", "--verify", "HEAD"], timeout_s)
    if head is None:
        return None  # not a git work tree (or no commit yet)
    status = _git(cwd, ["status", "--porcelain", "--untracked-files=normal"], timeout_s)
    dirty = bool(status and status.strip())
    diff_sha = None
    if dirty:
        diff = _git(cwd, ["diff", "--no-ext-diff", "--binary", "HEAD"], timeout_s) or b""
        diff_sha = hashlib.sha256(diff + (status or b"")).hexdigest()
    commit = head.decode("ascii", errors="replace").strip()
    return {"commit": commit, "dirty": dirty, "diff_sha": diff_sha}


def _git(cwd: str, args: list[str], timeout_s: float) -> bytes | None:
    """git's stdout, None when it failed; CodeUnreadable when it did not answer in time."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}  # a look never takes a lock
    argv = ["/bin/sh", "-c", _GATE, "sh", "git", "-C", cwd, *args]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        raise CodeUnreadable(f"git: {e.strerror or e}") from e
    WAITED_ELSEWHERE.add(proc.pid)  # before the gate opens: it cannot have exited yet
    try:
        out, _ = proc.communicate(b"", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)  # SIGKILL: its own group (start_new_session), by its pid
        if proc.stdout is not None:
            proc.stdout.close()
        proc.returncode = -9  # never waited for here: the orphan reaper reaps it once it dies
        raise CodeUnreadable(f"git {args[0]} in {cwd} did not answer in {timeout_s:g}s") from None
    finally:
        WAITED_ELSEWHERE.discard(proc.pid)
    return out if proc.returncode == 0 else None


def hash_paths(paths: Sequence[str]) -> str:
    """sha256 over every file under `paths` (sorted, each its path and content)."""
    digest = hashlib.sha256()
    count = 0
    for root in sorted(paths):
        for path in _files(root):
            count += 1
            if count > MAX_CODE_FILES:
                raise CodeUnreadable(f"runs.code_paths: more than {MAX_CODE_FILES} files")
            digest.update(path.encode("utf-8", "surrogateescape") + b"\0")
            try:
                with open(path, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        digest.update(chunk)
            except OSError as e:
                raise CodeUnreadable(f"{path}: {e.strerror or e}") from e
    return digest.hexdigest()


def _files(root: str) -> list[str]:
    if not os.path.isdir(root):
        return [root] if os.path.exists(root) else []
    found: list[str] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in (".git", "__pycache__"))
        found += [os.path.join(folder, n) for n in sorted(names)]
    return found
