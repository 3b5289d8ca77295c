"""watchdog.config.strictmodes: sshd-style StrictModes, the rule root applies to what it runs.

The config-level effects (errors at a key, the job's own program exempt) are in test_config.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from watchdog import config
from watchdog.config import strictmodes
from watchdog.config.strictmodes import check_owner_safety

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="StrictModes applies only when running as root (uid 0)"
)


def script(path: Path, mode: int = 0o755) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return path


def test_config_still_exports_check_owner_safety() -> None:
    """check_owner_safety moved here from watchdog.config, which re-exports it unchanged."""
    assert config.check_owner_safety is strictmodes.check_owner_safety


@needs_root
def test_owner_safety_accepts_root_owned_file(tmp_path: Path) -> None:
    """A root-owned 0755 file under root-owned folders (and sticky /tmp) is safe."""
    assert check_owner_safety(str(script(tmp_path / "hook.sh"))) is None
    assert check_owner_safety("/bin/sh") is None


@needs_root
def test_owner_safety_refuses_world_writable_file(tmp_path: Path) -> None:
    """A file that others may write is refused, naming the file and its mode."""
    hook = script(tmp_path / "hook.sh", mode=0o757)
    assert (
        check_owner_safety(str(hook)) == f"file {hook} is writable by group or others (mode 0757)"
    )


@needs_root
def test_owner_safety_refuses_writable_folder(tmp_path: Path) -> None:
    """A group-writable folder above the file is refused: anyone in it could swap the file."""
    folder = tmp_path / "hooks"
    folder.mkdir()
    hook = script(folder / "hook.sh")
    folder.chmod(0o775)
    assert (
        check_owner_safety(str(hook))
        == f"folder {folder} is writable by group or others (mode 0775)"
    )


@needs_root
def test_owner_safety_accepts_sticky_folder(tmp_path: Path) -> None:
    """A world-writable folder with the sticky bit (like /tmp) is fine for a root-owned file."""
    folder = tmp_path / "shared"
    folder.mkdir()
    hook = script(folder / "hook.sh")
    folder.chmod(0o1777)
    assert check_owner_safety(str(hook)) is None


@needs_root
def test_owner_safety_refuses_foreign_owner(tmp_path: Path) -> None:
    """A file owned by another uid is refused even if only its owner can write it."""
    hook = script(tmp_path / "hook.sh")
    os.chown(hook, 4242, 4242)
    assert check_owner_safety(str(hook)) == f"file {hook} is owned by uid 4242, not root"


@needs_root
def test_owner_safety_checks_symlink_folder(tmp_path: Path) -> None:
    """A safe target reached via a symlink in a writable folder is refused: the link can move."""
    folder = tmp_path / "links"
    folder.mkdir()
    (folder / "hook").symlink_to("/bin/true")
    folder.chmod(0o777)
    problem = check_owner_safety(str(folder / "hook"))
    assert problem is not None and str(folder) in problem


def secret(path: Path, text: str = "s3cret\n", mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_secret_behind_a_symlink_is_refused(tmp_path: Path) -> None:
    """A key or password file named through a symlink is refused (O_NOFOLLOW), though the file
    it points to is a safe secret: whoever may swap the link would choose what we read."""
    real = secret(tmp_path / "etcd.password")
    link = tmp_path / "link.password"
    link.symlink_to(real)
    assert strictmodes.check_secret_file(str(real)) is None
    assert strictmodes.read_secret(str(real)) == b"s3cret\n"
    said = f"{link} is a symbolic link: name the file itself"
    assert strictmodes.check_secret_file(str(link)) == said
    assert strictmodes.open_secret(str(link)) == said
    assert strictmodes.read_secret(str(link)) == said


def test_the_check_is_of_the_open_file_not_of_the_path(tmp_path: Path) -> None:
    """check_secret_fd judges the file an fd holds (fstat): a world-readable file whose path
    now names a safe one is still refused, and a checked fd reads the checked file after
    another is renamed over its path."""
    path = secret(tmp_path / "node.key", "open to all\n", mode=0o644)
    fd = os.open(path, os.O_RDONLY)
    try:
        secret(tmp_path / "safe.key", "safe\n").replace(path)  # the path is now a safe secret
        assert strictmodes.check_secret_fd(fd, str(path)) == (
            f"{path} has mode 0644: group or others can read it (chmod 600)"
        )
    finally:
        os.close(fd)
    checked = strictmodes.open_secret(str(path))
    assert isinstance(checked, int)
    try:
        secret(tmp_path / "swapped.key", "swapped\n", mode=0o644).replace(path)
        assert os.read(checked, 100) == b"safe\n"
    finally:
        os.close(checked)
    assert strictmodes.read_secret(str(path)) == (
        f"{path} has mode 0644: group or others can read it (chmod 600)"
    )


def test_a_fifo_as_a_secret_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO named as a secret is refused as no regular file; the open does not wait for a
    writer (O_NONBLOCK), so the check cannot hang."""
    fifo = tmp_path / "etcd.password"
    os.mkfifo(fifo, 0o600)
    assert strictmodes.read_secret(str(fifo)) == f"{fifo}: not a regular file"


@needs_root
def test_a_secret_owned_by_another_user_is_refused_on_the_open_file(tmp_path: Path) -> None:
    """A secret owned by neither root nor the daemon's user is refused, judged by fstat."""
    path = secret(tmp_path / "etcd.password")
    os.chown(path, 4242, 4242)
    assert strictmodes.read_secret(str(path)) == (
        f"{path} is owned by uid 4242, neither root nor the daemon's user"
    )
