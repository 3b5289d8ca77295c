"""notify's config (SPEC §16 "Tell me"): the URL file is a secret checked like
cluster.auth.password_file, each URL must be one Apprise can use, and no error quotes a URL."""

from __future__ import annotations

import pathlib
import subprocess

import pytest
from support.harness import BIN

from watchdog.config import ConfigError, load_config, notifyfile, strictmodes

SECRET = "tok-5f2b9c7e41d8a6"


def config(tmp: pathlib.Path, notify: str) -> str:
    path = tmp / "watchdog.yaml"
    path.write_text(f"job:\n  command: [/bin/true]\nnotify:\n{notify}")
    return str(path)


def urls(tmp: pathlib.Path, text: str, mode: int = 0o600) -> pathlib.Path:
    path = tmp / "notify.urls"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_defaults_tell_needs_you_and_done_without_a_file(tmp_path: pathlib.Path) -> None:
    """No notify section: no URL file, levels [needs_you, done], 600 s, no digest."""
    cfg = load_config(config(tmp_path, "  {}\n"))
    n = cfg.notify
    assert (n.urls_file, n.levels, n.min_interval_s, n.digest_at) == (
        None,
        ("needs_you", "done"),
        600.0,
        None,
    )


def test_a_good_file_loads_with_its_path_resolved(tmp_path: pathlib.Path) -> None:
    """A 0600 file of parseable URLs (comments and blanks allowed) loads; levels keep SPEC order."""
    urls(tmp_path, f"# mine\n\njson://127.0.0.1:9/h/{SECRET}\nntfy://ntfy.example.com/t\n")
    text = "  urls_file: notify.urls\n  levels: [fyi, needs_you]\n  digest_at: '08:00'\n"
    cfg = load_config(config(tmp_path, text))
    assert cfg.notify.urls_file == str(tmp_path / "notify.urls")
    assert cfg.notify.levels == ("needs_you", "fyi")
    assert cfg.notify.digest_at == "08:00"


def test_a_file_others_can_read_is_refused(tmp_path: pathlib.Path) -> None:
    """Mode 0644 is refused like a password file: chmod 600."""
    urls(tmp_path, f"json://127.0.0.1:9/h/{SECRET}\n", mode=0o644)
    with pytest.raises(ConfigError) as err:
        load_config(config(tmp_path, "  urls_file: notify.urls\n"))
    assert err.value.key == "notify.urls_file"
    assert "mode 0644" in err.value.problem and "chmod 600" in err.value.problem


def test_a_symlinked_file_is_refused_at_load_and_at_read(tmp_path: pathlib.Path) -> None:
    """A symlink to a safe 0600 URL file is refused like a symlinked password file (whoever can
    swap the link must not choose what is read), and the daemon's own read refuses it too."""
    target = urls(tmp_path, f"json://127.0.0.1:9/h/{SECRET}\n")
    (tmp_path / "link.urls").symlink_to(target)
    with pytest.raises(ConfigError) as err:
        load_config(config(tmp_path, "  urls_file: link.urls\n"))
    assert err.value.key == "notify.urls_file"
    assert "symbolic link" in err.value.problem and SECRET not in err.value.problem
    with pytest.raises(OSError, match="symbolic link"):
        notifyfile.read_urls(str(tmp_path / "link.urls"), strictmodes.read_secret)
    assert notifyfile.read_urls(str(target), strictmodes.read_secret) == [
        (1, f"json://127.0.0.1:9/h/{SECRET}")
    ]


def test_a_url_apprise_cannot_use_is_named_by_its_line_never_quoted(
    tmp_path: pathlib.Path,
) -> None:
    """`watchdogd --check` exits 78 naming the file and the line; the URL's secret is not shown."""
    urls(tmp_path, f"json://127.0.0.1:9/h/ok\n\nnosuch://{SECRET}@host/x\n")
    path = config(tmp_path, "  urls_file: notify.urls\n")
    run = subprocess.run(
        [str(BIN / "watchdogd"), "--check", "--config", path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 78
    assert f"{tmp_path / 'notify.urls'} line 3: not a URL Apprise can use" in run.stderr
    assert "scheme 'nosuch'" in run.stderr
    assert SECRET not in run.stdout + run.stderr


def test_without_apprise_the_extra_to_install_is_named(tmp_path: pathlib.Path) -> None:
    """With Apprise not importable, `--check` exits 78 saying to install the notify extra."""
    urls(tmp_path, "json://127.0.0.1:9/h\n")
    path = config(tmp_path, "  urls_file: notify.urls\n")
    shadow = tmp_path / "shadow" / "apprise"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('apprise is not installed here')\n")
    run = subprocess.run(
        [str(BIN / "watchdogd"), "--check", "--config", path],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(tmp_path / "shadow"), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 78, run.stderr
    assert "pip install 'train-watchdog[notify]'" in run.stderr


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("  levels: [loud]\n", "unknown level 'loud' (one of: needs_you, fyi, done)"),
        ("  digest_at: '8am'\n", 'expected a local time "HH:MM" (00:00-23:59)'),
        ("  min_interval_s: 0\n", "must be greater than 0"),
    ],
)
def test_bad_values_are_errors_naming_the_key(
    tmp_path: pathlib.Path, text: str, problem: str
) -> None:
    """A level that does not exist, a digest time that is not HH:MM, a zero interval: errors."""
    with pytest.raises(ConfigError) as err:
        load_config(config(tmp_path, text))
    assert problem in err.value.problem
