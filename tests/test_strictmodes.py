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
