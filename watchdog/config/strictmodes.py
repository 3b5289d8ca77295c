"""The checks a parsed config makes against the real filesystem (SPEC §6).

Programs must exist and be executable, `job.cwd` must be a folder, control groups must exist,
and while running as root, what root runs on the config's say must pass sshd-style StrictModes
(`check_owner_safety`). Nothing here knows the YAML: problems come back as plain text (with the
key path they belong to), and `watchdog.config` (load_config) turns them into ConfigErrors.
"""

from __future__ import annotations

import dataclasses
import errno
import grp
import os
import shutil
import stat
from typing import TYPE_CHECKING

from watchdog.config.notifyfile import check_urls_file

if TYPE_CHECKING:
    from watchdog.config.schema import Config


def check_owner_safety(path: str) -> str | None:
    """Why root should not trust `path` (sshd StrictModes), or None when it is safe.

    The file and every folder above it must be owned by root and not writable by group or
    others; a folder with the sticky bit (like /tmp) is fine, because others cannot rename or
    replace the root-owned entry inside it. Both the path as written and its symlink-free form
    are checked: a writable folder holding a symlink lets anyone swap the link.
    """
    absolute = os.path.abspath(path)
    for target in dict.fromkeys((absolute, os.path.realpath(absolute))):
        current, leaf = target, True
        while True:
            try:
                st = os.stat(current)
            except OSError as exc:
                return f"cannot check {current}: {exc.strerror}"
            what = "file" if leaf else "folder"
            if st.st_uid != 0:
                return f"{what} {current} is owned by uid {st.st_uid}, not root"
            sticky_dir = not leaf and st.st_mode & stat.S_ISVTX
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky_dir:
                mode = stat.S_IMODE(st.st_mode)
                return f"{what} {current} is writable by group or others (mode {mode:04o})"
            if current == "/":
                break
            current, leaf = os.path.dirname(current), False
    return None


def check_secret_fd(fd: int, path: str) -> str | None:
    """Why the file open at `fd` is no safe home for a secret (sshd's StrictModes for private
    keys), or None: a regular file owned by the daemon's user or root, with no access for group
    or others. Checked on the open file (fstat), so what is checked is what is read: a file
    swapped at `path` after the check is never read unchecked."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return f"{path}: not a regular file"
    if st.st_uid not in (0, os.geteuid()):
        return f"{path} is owned by uid {st.st_uid}, neither root nor the daemon's user"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return f"{path} has mode {mode:04o}: group or others can read it (chmod 600)"
    return None


def open_secret(path: str) -> int | str:
    """A read-only fd of the secret at `path`, checked by `check_secret_fd`, or why not. A
    symlink is refused (O_NOFOLLOW: whoever may swap a link must not choose what we read), and a
    FIFO does not block the open (O_NONBLOCK; it is then refused as no regular file)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{path} is a symbolic link: name the file itself"
        return f"{path}: cannot read: {exc.strerror}"
    try:
        problem = check_secret_fd(fd, path)
    except OSError as exc:
        problem = f"{path}: cannot read: {exc.strerror}"
    if problem is not None:
        os.close(fd)
        return problem
    return fd


def read_secret(path: str) -> bytes | str:
    """The whole secret at `path` (opened and checked by `open_secret`), or why not."""
    fd = open_secret(path)
    if isinstance(fd, str):
        return fd
    try:
        with open(fd, "rb") as f:  # closes fd
            return f.read()
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror}"


def check_secret_file(path: str) -> str | None:
    """Why `path` is no safe home for a secret (`open_secret`), or None."""
    fd = open_secret(path)
    if isinstance(fd, str):
        return fd
    os.close(fd)
    return None


def _check_cluster_files(cfg: Config) -> tuple[str, str] | None:
    """SPEC §15: the CA and the certificate must be readable; the key and the password file
    must be secrets only their owner can read."""
    cluster = cfg.cluster
    if cluster is None:
        return None
    if (tls := cluster.tls) is not None:
        for key, path in (("ca_file", tls.ca_file), ("cert_file", tls.cert_file)):
            if path is not None and not os.access(path, os.R_OK):
                return f"cluster.tls.{key}", f"{path}: not a readable file"
        if tls.key_file is not None and (problem := check_secret_file(tls.key_file)):
            return "cluster.tls.key_file", problem
    if (auth := cluster.auth) is not None and (problem := check_secret_file(auth.password_file)):
        return "cluster.auth.password_file", problem
    return None


def _check_program(program: str, env_path: str, strict: bool) -> str | None:
    """Why `program` cannot be run (searched on `env_path` if it has no slash), or None."""
    found = program if "/" in program else shutil.which(program, path=env_path)
    if found is None:
        return f"{program!r}: no such executable on PATH"
    if not os.path.isfile(found):
        return f"{found}: no such file (or not a regular file)"
    if not os.access(found, os.X_OK):
        return f"{found}: not executable (chmod +x)"
    if strict and (problem := check_owner_safety(found)):
        return f"refused while running as root: {problem}"
    return None


def _program_path(cfg: Config) -> str:
    # The child is exec'd with job.env on top of the daemon's environment, so its PATH wins.
    return cfg.job.env.get("PATH", os.environ.get("PATH", os.defpath))


def resolve_programs(cfg: Config) -> Config:
    """Bare `pre_start` names resolved once, on the PATH the command will get: the absolute path
    found here is the one checked and the one executed, so a program planted later in an
    earlier PATH folder never runs as root. Names not found stay (check_filesystem says so)."""
    env_path = _program_path(cfg)
    pre_start = tuple(
        (shutil.which(argv[0], path=env_path) or argv[0], *argv[1:]) if "/" not in argv[0] else argv
        for argv in cfg.job.pre_start
    )
    return dataclasses.replace(cfg, job=dataclasses.replace(cfg.job, pre_start=pre_start))


def check_filesystem(cfg: Config) -> tuple[str, str] | None:
    """The first (key path, problem) the filesystem finds with `cfg`, or None when all is well."""
    job = cfg.job
    if job.cwd is not None and not os.path.isdir(job.cwd):
        return "job.cwd", f"{job.cwd}: not an existing directory"
    env_path = _program_path(cfg)
    # StrictModes (SPEC §6) guards what root runs on the config's say: hooks and pre_start.
    strict = os.geteuid() == 0
    programs: list[tuple[str, str, bool]] = []  # (key, program, strict), in the file's order
    if not job.shell:
        programs.append(("job.command", job.command[0], False))
    programs += [(f"job.pre_start[{i}]", argv[0], strict) for i, argv in enumerate(job.pre_start)]
    if cfg.hooks.on_event is not None:
        programs.append(("hooks.on_event", cfg.hooks.on_event, strict))
    for key, program, strict_here in programs:
        if problem := _check_program(program, env_path, strict_here):
            return key, problem
    if (found := _check_cluster_files(cfg)) is not None:
        return found
    urls = cfg.notify.urls_file  # SPEC §16: a file of secrets, then URLs Apprise can use
    if urls is not None and (problem := check_urls_file(urls, read_secret)):
        return "notify.urls_file", problem
    for key, name in (
        ("control.group", cfg.control.group),
        ("control.operator_group", cfg.control.operator_group),
    ):
        if name is not None:
            try:
                grp.getgrnam(name)
            except KeyError:
                return key, f"no such group: {name!r}"
    return None
