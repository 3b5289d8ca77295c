"""notify end to end (SPEC §16 "Tell me"): a real watchdogd tells real receivers on loopback
through Apprise — an HTTP server taking `json://` and `ntfy://` posts, aiosmtpd for `mailto://`.

Each test asserts exactly what arrived; the URL file's secret token appears nowhere the daemon
writes or prints.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
import yaml
from conftest import DaemonFactory
from support import fakeclock
from support.harness import wait_until, write_script
from support.receivers import HttpSink, MailSink, Silent

SECRET = "tok-5f2b9c7e41d8a6"  # in the URL's path: a receiver's credential
LEAD_S = 20  # the daemon is up well within this (it waits 30 s for "running" anyway)
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


@pytest.fixture
def http_sink() -> Iterator[HttpSink]:
    sink = HttpSink()
    yield sink
    sink.close()


@pytest.fixture
def mail_sink() -> Iterator[MailSink]:
    sink = MailSink()
    yield sink
    sink.close()


def urls_file(tmp: pathlib.Path, *urls: str) -> str:
    path = tmp / "notify.urls"
    path.write_text("# where the watchdog tells me\n" + "\n".join(urls) + "\n")
    path.chmod(0o600)
    return str(path)


def oom_job(tmp: pathlib.Path) -> str:
    """A job that prints a step and dies of a CUDA OOM: parked after two (repeated_cause)."""
    return write_script(
        tmp / "oom.py",
        f"""
        import sys
        print("step 5/100 | 1,000 tok/s", flush=True)
        print({OOM!r}, file=sys.stderr, flush=True)
        sys.exit(1)
        """,
    )


def flaky_job(tmp: pathlib.Path) -> str:
    """A job that dies with a different message each run: never parked as a repeat."""
    return write_script(
        tmp / "flaky.py",
        """
        import os, sys
        print("step 5/100 | 1,000 tok/s", flush=True)
        print(f"RuntimeError: run {os.getpid()} went away", file=sys.stderr, flush=True)
        sys.exit(1)
        """,
    )


def assert_secret_nowhere(tmp: pathlib.Path, *outputs: str) -> None:
    """The URL's token is in no file under the test's folder but the URL file, and in no output."""
    for text in outputs:
        assert SECRET not in text
    for path in tmp.rglob("*"):
        if path.is_file() and path.name != "notify.urls":
            assert SECRET.encode() not in path.read_bytes(), path


def test_a_park_is_told_once_naming_the_cause_and_the_next_command(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, http_sink: HttpSink
) -> None:
    """A job parked for a repeated cuda_oom sends exactly one json:// message (needs_you only by
    default), naming the cause, its line, the bundle to explain and `watchdogctl start`."""
    urls = urls_file(tmp_path, f"json://127.0.0.1:{http_sink.port}/hook/{SECRET}")
    tracker = tmp_path / "ckpt" / "latest_checkpointed_iteration.txt"
    tracker.parent.mkdir()
    tracker.write_text("4\n")  # Megatron's tracker: iteration 4 is the newest complete one
    over = {
        "notify": {"urls_file": urls},
        "progress": {
            "pattern": r"step (?P<step>\d+)/\d+ \| (?P<tokens_per_s>[0-9,.]+) tok/s",
            "checkpoint": {"path": str(tracker), "kind": "megatron"},
        },
    }
    d = make_daemon([oom_job(tmp_path)], over)
    fatal = d.wait_event("fatal", timeout=30)[0]
    sent = d.wait_event("notify_sent", timeout=30)[0]
    wait_until(lambda: http_sink.posts, 10, "the post")
    [post] = http_sink.posts
    assert post.path == f"/hook/{SECRET}"
    body = post.json()
    assert body["title"] == sent["title"] == "testjob needs you: fatal (cuda_oom)"
    lines = body["message"].splitlines()
    assert len(lines) <= 12
    # The step is known where the daemon read the job's step line before its exit (a race the
    # job, printing and dying at once, may win): the pure tests pin the step's place.
    assert {"Cause: cuda_oom", "Cause: cuda_oom (step 5)"} & set(lines)
    assert f"Line: {OOM}" in lines
    assert any(line.startswith(f"Checkpoint: iteration 4 at {tracker} (") for line in lines)
    assert any(line.startswith("Work lost: up to ") for line in lines)
    assert f"Next: watchdogctl explain {fatal['incident']}" in lines
    assert "Then: watchdogctl start (once fixed)" in lines
    assert sent["level"] == "needs_you" and sent["url"] == 2  # its line in the file
    d.stop()
    assert len(http_sink.posts) == 1  # the restart before the park was fyi: not asked for
    assert_secret_nowhere(tmp_path, d.output())


def test_a_crash_loop_is_at_most_two_messages_on_ntfy(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, http_sink: HttpSink
) -> None:
    """A dozen restarts within a minute with fyi on: the first restart told at once, the rest
    merged into the park's message — two ntfy posts, not thirteen."""
    urls = urls_file(tmp_path, f"ntfy://127.0.0.1:{http_sink.port}/alerts")
    over = {
        "notify": {"urls_file": urls, "levels": ["needs_you", "fyi"]},
        "restart": {"max_restarts": 12, "same_cause_limit": 50},
    }
    d = make_daemon([flaky_job(tmp_path)], over)
    d.wait_event("fatal", timeout=60)
    d.wait_event("notify_sent", timeout=30, count=2)
    d.stop()
    restarts = [e for e in d.history() if e["event"] == "restart_scheduled"]
    assert len(restarts) >= 11
    titles = [p.json()["title"] for p in http_sink.posts]
    assert len(titles) == 2, titles
    assert titles[0] == "testjob restarted after python_exception"
    assert titles[1].startswith("testjob needs you: fatal")
    assert all(p.json()["topic"] == "alerts" for p in http_sink.posts)
    before = f"Before: {len(restarts) - 1} restarts in 1 min: python_exception ×{len(restarts) - 1}"
    assert before in http_sink.posts[1].json()["message"].splitlines()


def test_a_completed_job_is_told_by_mail(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, mail_sink: MailSink
) -> None:
    """A job that exits 0 sends one plain-text e-mail through a real SMTP server."""
    done = write_script(tmp_path / "done.py", "print('step 100/100 | 1,000 tok/s', flush=True)\n")
    url = f"mailto://127.0.0.1:{mail_sink.port}?from=watchdog@example.com&to=me@example.com"
    d = make_daemon([done], {"notify": {"urls_file": urls_file(tmp_path, url)}})
    d.wait_event("job_completed", timeout=30)
    d.wait_event("notify_sent", timeout=30, level="done")
    wait_until(lambda: mail_sink.messages, 10, "the mail")
    [mail] = mail_sink.messages
    assert mail["Subject"] == "testjob completed"
    assert mail["To"] == "me@example.com"
    text = mail_sink.text(mail)
    assert "Completed: the job exited with a success code." in text
    assert "Next: watchdogctl runs" in text


def test_a_receiver_that_is_gone_fails_and_the_job_still_restarts(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A URL whose port refuses: notify_failed names its line, never the URL, and the killed job
    is restarted all the same."""
    gone = HttpSink()
    gone.close()  # its port now refuses
    urls = urls_file(tmp_path, f"json://127.0.0.1:{gone.port}/hook/{SECRET}")
    job = write_script(tmp_path / "crash.py", "import sys\nsys.exit(3)\n")
    over = {"notify": {"urls_file": urls, "levels": ["needs_you", "fyi"]}}
    d = make_daemon([job], over)
    failed = d.wait_event("notify_failed", timeout=30)[0]
    d.wait_event("child_spawned", timeout=30, count=3)
    assert failed["url"] == 2 and failed["attempt"] == 1 and failed["retry_in_s"] == 30.0
    d.stop()
    assert_secret_nowhere(tmp_path, d.output())


def test_a_receiver_that_never_answers_holds_up_nothing(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, http_sink: HttpSink
) -> None:
    """With a hung receiver on line 2, the receiver on line 3 still gets the park's message and
    the daemon answers meanwhile."""
    silent = Silent()
    try:
        urls = urls_file(
            tmp_path,
            f"json://127.0.0.1:{silent.port}/hook/{SECRET}",
            f"json://127.0.0.1:{http_sink.port}/ok",
        )
        d = make_daemon([oom_job(tmp_path)], {"notify": {"urls_file": urls}})
        d.wait_event("fatal", timeout=30)
        d.wait_event("notify_sent", timeout=30, url=3)
        wait_until(lambda: silent.accepted, 10, "the hung receiver's connection")
        assert d.status()["state"] == "fatal"
        assert [p.path for p in http_sink.posts] == ["/ok"]
    finally:
        silent.close()


def test_notify_test_reports_each_url_by_line_and_scheme(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, http_sink: HttpSink
) -> None:
    """`watchdogctl notify test --level fyi` sends one test message to each URL, prints each
    result by line and scheme only, and exits 1 because the refusing URL failed."""
    gone = HttpSink()
    gone.close()
    urls = urls_file(
        tmp_path,
        f"ntfy://127.0.0.1:{http_sink.port}/{SECRET}",
        f"json://127.0.0.1:{gone.port}/hook/{SECRET}",
    )
    job = write_script(tmp_path / "idle.py", "import time\nwhile True:\n    time.sleep(1)\n")
    d = make_daemon([job], {"notify": {"urls_file": urls}})
    code, out, err = d.ctl("notify", "test", "--level", "fyi")
    assert code == 1, err
    assert out.splitlines() == [
        "test message (fyi) sent to 1 of 2 URLs",
        "  line 2 (ntfy://…): sent",
        out.splitlines()[2],
    ]
    assert out.splitlines()[2].startswith("  line 3 (json://…): FAILED: ")
    [post] = http_sink.posts
    assert post.json()["title"] == "testjob: test message (fyi)"
    assert post.json()["topic"] == SECRET
    code, out, _ = d.ctl("notify", "test", "--level", "loud")
    assert code == 2 and "level must be one of needs_you, fyi, done" in out + _
    d.stop()
    assert_secret_nowhere(tmp_path, d.output(), out)


def test_notify_test_without_a_url_file_fails(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """With no notify.urls_file there is nothing to test: said so, exit 1."""
    job = write_script(tmp_path / "idle.py", "import time\nwhile True:\n    time.sleep(1)\n")
    d = make_daemon([job])
    code, out, _ = d.ctl("notify", "test")
    assert code == 1
    assert out.strip() == "notify.urls_file is not set: no URL to test (docs/notify.md)"


def test_the_digest_goes_at_its_local_time(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, http_sink: HttpSink
) -> None:
    """With notify.digest_at the next local minute of the daemon's wall clock (shifted by
    tests/fake_clock so that minute is 20 s away), the daemon sends one digest of the last 24 h
    at that local time: its runs, its restarts, the state now."""
    import datetime
    import math
    import time

    offset = tmp_path / "clock-offset"
    now = time.time()
    minute = (math.floor(now / 60) + 2) * 60  # a whole minute, over a minute ahead
    fakeclock.step(offset, minute - LEAD_S - now)  # the daemon's clock: LEAD_S before it
    digest_at = datetime.datetime.fromtimestamp(minute).strftime("%H:%M")
    urls = urls_file(tmp_path, f"json://127.0.0.1:{http_sink.port}/digest")
    job = write_script(
        tmp_path / "train.py",
        "import time\nwhile True:\n    print('1,000.0 tok/s', flush=True)\n    time.sleep(0.5)\n",
    )
    d = make_daemon(
        [job],
        {"notify": {"urls_file": urls, "digest_at": digest_at}},
        env=fakeclock.shifted_env(offset, {}),
    )
    d.wait_state("running", timeout=30)
    sent = d.wait_event("notify_sent", timeout=LEAD_S + 60, level="digest")[0]
    assert sent["title"] == "testjob: the last 24 h: 0 restarts"
    wait_until(lambda: http_sink.posts, 10, "the digest's post")
    [post] = http_sink.posts
    lines = post.json()["message"].splitlines()
    assert "Runs started: 1" in lines and "State now: running" in lines
    assert "Throughput now: 1,000 tok/s" in lines
    assert lines[-1] == "Next: watchdogctl timeline --since 24h"


def test_a_reload_brings_in_a_new_url_file(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, http_sink: HttpSink
) -> None:
    """notify set by `watchdogctl reload` is in force when the reload answers: a `notify test`
    right after it reaches the new URL."""
    job = write_script(tmp_path / "idle.py", "import time\nwhile True:\n    time.sleep(1)\n")
    d = make_daemon([job])
    urls = urls_file(tmp_path, f"json://127.0.0.1:{http_sink.port}/new")
    d.cfg["notify"] = {"urls_file": urls}
    d.config_path.write_text(yaml.safe_dump(d.cfg))
    code, _, err = d.ctl("reload")
    assert code == 0, err
    code, out, _ = d.ctl("notify", "test")
    assert code == 0 and "  line 2 (json://…): sent" in out.splitlines()
    assert [p.path for p in http_sink.posts] == ["/new"]
