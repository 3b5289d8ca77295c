"""End to end (SPEC §14): the state directory on a real full tmpfs and a real read-only bind
mount, at start and mid-run; state.json emptied, garbage or torn after an operator's stop."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pathlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import DaemonFactory
from support.harness import Daemon, Peeks, wait_until, write_script
from support.scripts import stepper

NOT_ROOT = "mounting a tmpfs or a bind mount needs root (uid 0); this test runs as uid {}"


def _need_root() -> None:
    if os.geteuid() != 0:
        reason = NOT_ROOT.format(os.geteuid())
        print(f"SKIP: {reason}")
        pytest.skip(reason)


def _mount(*args: str) -> None:
    r = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"mount {' '.join(args)}: {r.stderr}"


def _umount(path: pathlib.Path) -> None:
    """Unmount; lazily when something still holds it (the test fails on its own, not here)."""
    r = subprocess.run(["umount", str(path)], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


@contextlib.contextmanager
def tiny_tmpfs(path: pathlib.Path, size: str = "1m") -> Iterator[pathlib.Path]:
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size},mode=0750", "tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


@contextlib.contextmanager
def bind_mount(path: pathlib.Path) -> Iterator[pathlib.Path]:
    """`path` bind-mounted onto itself, so that it can be made read-only (remount_ro)."""
    path.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(path), str(path))
    try:
        yield path
    finally:
        _umount(path)


def remount(path: pathlib.Path, mode: str) -> None:
    _mount("-o", f"remount,{mode},bind", str(path))


def fill(folder: pathlib.Path) -> pathlib.Path:
    """Fill the file system under `folder` to the last byte: the filler file."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (1 << 16, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as e:
        (folder / "probe").write_bytes(b"x" * 8192)
    assert e.value.errno == errno.ENOSPC
    return filler


def sleeper(tmp: pathlib.Path) -> str:
    return write_script(
        tmp / "sleeper.py",
        """
        import time
        while True:
            print("step 10.0 tok/s", flush=True)
            time.sleep(0.2)
        """,
    )


def check(d: Daemon) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(d.bin / "watchdogd"), "--check", "--config", str(d.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _refused_at_start(d: Daemon, state: pathlib.Path, errname: str) -> None:
    """watchdogd exits 78 with one line naming the folder and the errno, no traceback, no job;
    `watchdogd --check` fails the same way, with no `config OK` printed first."""
    d.start(wait=False)
    try:
        rc = d.wait_exit(30)
    finally:
        d.stop()
    out = d.output().strip()
    assert rc == 78, out
    assert len(out.splitlines()) == 1 and "Traceback" not in out, out
    assert str(state) in out and errname in out, out
    assert not d.job_processes()
    r = check(d)
    assert r.returncode == 78, (r.stdout, r.stderr)
    assert str(state) in r.stderr and errname in r.stderr, r.stderr
    assert "config OK" not in r.stdout, r.stdout  # never an OK before the error


def test_a_full_state_disk_at_start_is_one_line_and_78(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A state directory on a full tmpfs: exit 78 naming it and ENOSPC, as --check does."""
    _need_root()
    with tiny_tmpfs(tmp_path / "state", "256k") as state:
        d = make_daemon([sleeper(tmp_path)], {"state_dir": str(state)}, start=False)
        assert check(d).returncode == 0
        fill(state)
        _refused_at_start(d, state, "ENOSPC")


def test_a_read_only_state_dir_at_start_is_one_line_and_78(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A state directory on a read-only bind mount: exit 78 naming it and EROFS, as --check."""
    _need_root()
    with bind_mount(tmp_path / "state") as state:
        remount(state, "ro")
        d = make_daemon([sleeper(tmp_path)], {"state_dir": str(state)}, start=False)
        _refused_at_start(d, state, "EROFS")


def _toggle(d: Daemon, times: int, errname: str) -> None:
    """Operator decisions that must be kept (pause, resume) while the disk fails: each one
    taken, each one a state.json write, and each reply an error saying it is not saved (an
    answer is on disk, docs/state.md), never a success."""
    for _ in range(times):
        for cmd, state in (("pause", "paused"), ("resume", "running")):
            rc, out, err = d.ctl(cmd)
            assert rc == 1 and "NOT saved" in err and errname in err, (rc, out, err)
            d.wait_state(state, timeout=20)


def _failed(d: Daemon | Peeks, file: str) -> list[dict[str, Any]]:
    return [e for e in d.events() if e["event"] == "state_write_failed" and e.get("file") == file]


def _fails_then_resumes(d: Daemon, errname: str, heal: Any) -> None:
    """Writes that fail are one state_write_failed (not one per write), status says since when;
    once the disk is back, state_write_resumed counts them and events.jsonl has no torn line."""
    d.wait_for(lambda v: _failed(v, "state.json"), 30, "the first state_write_failed")
    _toggle(d, 4, errname)
    first = _failed(d, "state.json")
    assert len(first) == 1 and errname in first[0]["error"], first
    # the writes are off the loop: the last pause's may still be under way
    st = d.wait_status(
        lambda s: s if s["state_writes"]["failed_writes"] >= 4 else None,
        30,
        "four failed writes counted",
    )
    assert st["state_writes"]["ok"] is False, st
    assert st["state_writes"]["failing_since"], st
    _rc, out, _ = d.ctl("status")
    assert "writes failing since" in out, out
    assert d.wait_state("running")["job"]["pid"]  # the job is never touched for it
    heal()
    # no new change: the last resume undid the last pause, yet what is on disk is unknown, so
    # the retry (writers.RETRY_S) writes it and ends the spell
    resumed = d.wait_event("state_write_resumed", timeout=40, file="state.json")[0]
    assert resumed["failed_writes"] >= 4 and resumed["failing_for_s"] > 0, resumed
    # the other files (goodput.json, timeline.json) are tried again within writers.RETRY_S
    d.wait_status(lambda s: s["state_writes"]["ok"], 40, "every state file written again")
    history = d.state_dir / "events.jsonl"

    def resumed_on_disk() -> bool:
        lines = history.read_text().splitlines()
        events = [json.loads(x)["event"] for x in lines]  # a torn line fails here
        return "state_write_resumed" in events

    wait_until(resumed_on_disk, 20, "state_write_resumed in events.jsonl")


def test_a_state_disk_that_fills_up_mid_run(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """tmpfs full while the job runs: the job runs on, one failure event, status shows it,
    resumed (with the count) once space is freed; the history keeps no torn line."""
    _need_root()
    with tiny_tmpfs(tmp_path / "state", "2m") as state:
        d = make_daemon([sleeper(tmp_path)], {"state_dir": str(state)})
        try:
            d.wait_state("running", timeout=30)
            filler = fill(state)
            _toggle(d, 1, "ENOSPC")
            _fails_then_resumes(d, "ENOSPC", filler.unlink)
        finally:
            d.stop()


def test_a_state_dir_remounted_read_only_mid_run(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """The state directory made read-only while the job runs, then writable again (the bind
    mount goes on top once the daemon runs: its lock file, open for writing, would keep a
    read-only remount of its own mount busy)."""
    _need_root()
    d = make_daemon([sleeper(tmp_path)])
    d.wait_state("running", timeout=30)
    with bind_mount(d.state_dir) as state:
        try:
            remount(state, "ro")
            _toggle(d, 1, "EROFS")
            _fails_then_resumes(d, "EROFS", lambda: remount(state, "rw"))
        finally:
            d.stop()


CORRUPTIONS = {
    "emptied": (lambda text: b"", "empty"),
    "garbage": (lambda text: os.urandom(64) + b"\xff\xfe", "binary"),
    "wrong shape": (lambda text: b"[1, 2, 3]\n", "wrong shape"),
    "torn": (lambda text: text[: len(text) // 2], "not JSON"),
}


def _stopped_then_corrupted(
    make_daemon: DaemonFactory, tmp: pathlib.Path, how: str, prev_too: bool
) -> Daemon:
    """A running job stopped by the operator, the daemon ended, state.json corrupted `how`
    (and state.json.prev emptied with `prev_too`): the next daemon, started."""
    d = make_daemon([sleeper(tmp)])
    d.wait_state("running", timeout=30)
    rc, _, err = d.ctl("stop")
    assert rc == 0, err
    d.wait_state("stopped", timeout=30)
    assert d.stop() == 0
    state_json = d.state_dir / "state.json"
    assert json.loads(state_json.read_text())["supervisor"]["stopped"] is True
    corrupt, _ = CORRUPTIONS[how]
    state_json.write_bytes(corrupt(state_json.read_bytes()))
    if prev_too:
        (d.state_dir / "state.json.prev").write_bytes(b"")
    return make_daemon([sleeper(tmp)])


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_a_corrupt_state_file_after_a_stop_keeps_the_job_stopped(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, how: str
) -> None:
    """state.json emptied, garbage, [1,2,3] or torn after an operator's stop: state_reset names
    what was wrong, the previous generation says stopped, and nothing is started."""
    d2 = _stopped_then_corrupted(make_daemon, tmp_path, how, prev_too=False)
    reset = d2.wait_event("state_reset", timeout=20)[0]
    assert reset["file"].endswith("state.json"), reset
    assert CORRUPTIONS[how][1] in reset["error"], reset
    assert reset["fallback"] == "the previous generation state.json.prev", reset
    assert d2.wait_state("stopped", timeout=20)["job"]["pid"] is None
    evs = d2.events()
    started = max(i for i, e in enumerate(evs) if e["event"] == "daemon_started")
    assert not [e for e in evs[started:] if e["event"] == "child_spawned"], evs[started:]
    assert not d2.job_processes()


def test_both_generations_unusable_start_from_nothing_and_say_so(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """state.json torn and state.json.prev empty: two state_reset events, each saying the
    daemon starts afresh; with nothing kept, the job is started."""
    d2 = _stopped_then_corrupted(make_daemon, tmp_path, "torn", prev_too=True)
    resets = d2.wait_event("state_reset", timeout=20, count=2)
    assert [r["file"].rsplit("/", 1)[1] for r in resets] == ["state.json", "state.json.prev"]
    assert {r["fallback"] for r in resets} == {"nothing: starting afresh"}
    d2.wait_state("running", timeout=30)


@pytest.mark.parametrize("name", ["goodput.json", "timeline.json"])
def test_every_state_file_falls_back_to_its_previous_generation(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path, name: str
) -> None:
    """goodput.json or timeline.json emptied while no daemon runs: state_reset names it and the
    previous generation is used (no goodput_reset / timeline_reset: nothing was lost)."""
    d = make_daemon([sleeper(tmp_path)])
    d.wait_state("running", timeout=30)
    assert d.stop() == 0
    path = d.state_dir / name
    assert json.loads(path.read_text()) == json.loads((d.state_dir / f"{name}.prev").read_text())
    path.write_bytes(b"")
    d2 = make_daemon([sleeper(tmp_path)])
    reset = d2.wait_event("state_reset", timeout=20, file=str(path))[0]
    assert reset["error"] == "empty" and reset["fallback"].endswith(f"{name}.prev"), reset
    assert not [e for e in d2.events() if e["event"] in ("goodput_reset", "timeline_reset")]


def test_steps_alone_do_not_rewrite_state_json_and_the_mark_is_kept_at_exit(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A job printing 20 steps a second: state.json is not replaced for each new high step
    (docs/state.md), and the highest step is on disk once the daemon has exited."""
    pattern = r"step (?P<step>\d+) (?P<tokens_per_s>[0-9,.]+) tok/s"
    d = make_daemon([stepper(tmp_path)], {"progress": {"pattern": pattern}})
    d.wait_state("running", timeout=30)
    state_json = d.state_dir / "state.json"

    def mark() -> object:
        try:  # written off the loop: the file may not be there yet
            return json.loads(state_json.read_text())["supervisor"]["best_mark"]
        except (OSError, ValueError, KeyError):
            return None

    wait_until(mark, 20, "a mark")
    first_step = d.status()["progress"]["step"]
    inodes = set()
    deadline = time.monotonic() + 3.0  # an observation window, not a synchronisation
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            inodes.add(os.stat(state_json).st_ino)
        time.sleep(0.01)
    last_step = d.status()["progress"]["step"]
    assert last_step - first_step >= 20, (first_step, last_step)
    assert len(inodes) <= 2, f"state.json replaced {len(inodes) - 1} times in 3 s"
    assert d.stop() == 0
    saved = json.loads(state_json.read_text())["supervisor"]["best_mark"]
    assert saved >= last_step, (saved, last_step)


def _dying_stepper(tmp: pathlib.Path) -> str:
    """A job that makes progress (its steps go on from the last run's, kept beside it, so no
    death is a repeat without progress) for 3 s, then exits 1: a run every few seconds."""
    return write_script(
        tmp / "dying.py",
        """
        import os, sys, time
        kept = os.path.join(os.path.dirname(os.path.abspath(__file__)), "steps")
        first = int(open(kept).read()) + 1 if os.path.exists(kept) else 1
        for step in range(first, first + 60):
            print(f"step {step} 500.0 tok/s", flush=True)
            time.sleep(0.05)
        open(kept, "w").write(str(step))
        sys.exit(1)
        """,
    )


def _ledger_runs(d: Daemon) -> list[int]:
    try:
        text = (d.state_dir / "runs.jsonl").read_text()
        return [json.loads(line)["run"] for line in text.splitlines() if line.strip()]
    except (OSError, ValueError):
        return []  # written off the loop: not there yet


def _settled_runs(d: Daemon | Peeks, since_start: int = 0) -> set[int]:
    """The runs run_settled named in the daemon's own events, of the `since_start`-th daemon
    on (0: all of them)."""
    evs = d.events()
    starts = [i for i, e in enumerate(evs) if e["event"] == "daemon_started"]
    first = starts[since_start - 1] if since_start else 0
    return {e["run"] for e in evs[first:] if e["event"] == "run_settled"}


def _at_least(n: int, runs: set[int]) -> set[int] | None:
    return runs if len(runs) >= n else None


def test_run_numbers_given_while_the_disk_failed_are_never_given_again(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Runs numbered while the state dir is read-only, the daemon SIGKILLed, the disk back:
    the next daemon's runs (its events and runs.jsonl) never take those numbers again."""
    _need_root()
    pattern = r"step (?P<step>\d+) (?P<tokens_per_s>[0-9,.]+) tok/s"
    over = {"progress": {"pattern": pattern}, "runs": {"warmup_s": 0.2}}
    d = make_daemon([_dying_stepper(tmp_path)], over)
    wait_until(lambda: 1 in _ledger_runs(d), 60, "run 1 in runs.jsonl")
    with bind_mount(d.state_dir) as state:
        try:
            remount(state, "ro")
            unwritten = d.wait_for(
                lambda v: _at_least(3, _settled_runs(v) - {1}),
                90,
                "three runs numbered while the disk fails",
            )
            assert 1 not in unwritten and set(_ledger_runs(d)) == {1}  # none of them on disk
            d.kill()
            d.kill_job_processes()
            remount(state, "rw")
            d2 = Daemon(tmp_path, d.cfg).start()
            try:
                starts = sum(e["event"] == "daemon_started" for e in d2.events())
                again = d2.wait_for(
                    lambda v: _at_least(2, _settled_runs(v, starts)),
                    90,
                    "two runs of the next daemon",
                )
                assert not again & unwritten, (again, unwritten)
                wait_until(lambda: again <= set(_ledger_runs(d2)), 60, "its runs in runs.jsonl")
                ledger = _ledger_runs(d2)
                assert not set(ledger) & unwritten, (ledger, unwritten)
                assert len(ledger) == len(set(ledger)), ledger
            finally:
                d2.stop()
        finally:
            d.stop()
