"""`watchdogctl timeline` as a person uses it (issue 25, SPEC §13): a real daemon over simulated
GPUs whose job crashes twice, then the command in a real terminal (tmux: send-keys,
capture-pane) and without one, its JSON, and the history across a daemon SIGKILL and restart."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import uuid
from typing import Any

import pytest
from conftest import DaemonFactory
from support import fakegpu
from support.harness import BIN, Daemon, base_config, wait_until, write_script

from watchdog import cli
from watchdog.cli import timeline as timeline_view
from watchdog.core.views.goodput import LOST_CAUSES

ESC = re.compile(r"\x1b\[[0-9;]*m")
PATTERN = r"step (?P<step>\d+) (?P<tokens_per_s>[0-9][0-9,.]*) tok/s"


def crash_twice_job(tmp: pathlib.Path) -> str:
    """Holds 30 GB on each of 2 simulated GPUs and prints progress; runs 1 and 2 exit with code
    3 after three lines, run 3 keeps going."""
    return write_script(
        tmp / "crash_twice.py",
        f"""
        import os, sys, time
        runs = {str(tmp / "runs")!r}
        n = int(open(runs).read()) + 1 if os.path.exists(runs) else 1
        open(runs, "w").write(str(n))
        procs = os.path.join(os.environ["FAKE_NVML_DIR"], "procs")
        os.makedirs(procs, exist_ok=True)
        with open(os.path.join(procs, str(os.getpid())), "w") as f:
            f.write("gpu=0 mib=30000\\ngpu=1 mib=30000\\n")
        for step in range(1, 100000):
            print(f"step {{step}} {{1000 * n + step}}.0 tok/s", flush=True)
            if n <= 2 and step >= 3:
                sys.exit(3)
            time.sleep(0.2)
        """,
    )


def start_crashing(make_daemon: DaemonFactory, tmp: pathlib.Path) -> Daemon:
    """A daemon whose job has crashed twice and now runs healthy (1 s timeline buckets)."""
    gpus = tmp / "gpus"
    fakegpu.write_gpus(gpus, n=2)
    d = make_daemon(
        [crash_twice_job(tmp)],
        {
            "gpus": {"devices": "all", "sample_interval_s": 0.2, "idle_samples": 50},
            "progress": {"pattern": PATTERN},
            "timeline": {"bucket_s": 1},
        },
        env=fakegpu.fake_env(gpus),
    )
    d.wait_event("restart_scheduled", count=2, timeout=30)

    def settled(res: dict[str, Any] | None) -> bool:
        if res is None:
            return True  # the daemon out of reach: watchdogctl says why
        running = [b for b in res["buckets"] if b["state"] == "running" and b["gpus_in_use"] == 2]
        return len(all_events(res, "restart_scheduled")) == 2 and len(running) >= 3

    # Polled over the socket from this process with the arguments `timeline --json --since
    # 10m` sends (a watchdogctl per look, 20 ms apart, kept a core busy for the seconds of
    # running waited for), then confirmed by the real watchdogctl.
    asked = {"since": 600.0, "columns": timeline_view.PLOT_COLUMNS}
    wait_until(
        lambda: settled(d._peek("timeline", asked)) and settled(timeline_json(d, "--since", "10m")),
        30,
        "the restarts, then 3 s of running on both GPUs, in the timeline",
        interval=0.05,
    )
    return d


def timeline_json(d: Daemon, *args: str) -> dict[str, Any]:
    rc, out, err = d.ctl("timeline", "--json", *args)
    assert rc == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def all_events(res: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [e for b in res["buckets"] for e in b["events"] if e["event"] == name]


def check_screen(text: str, incident_paths: set[str] = frozenset()) -> list[str]:
    """Every line fits 100 columns (an incident path excepted); the picture's rows are there;
    returns the lines."""
    lines = ESC.sub("", text).splitlines()
    for line in lines:
        assert len(line) <= 100 or any(p in line for p in incident_paths), line
    labels = [line[:8].strip() for line in lines]
    for row in ("UTC", "state", "tok/s", "GPUs", "marks"):
        assert row in labels, (row, text)
    return lines


def row(lines: list[str], label: str) -> str:
    return next(line[9:] for line in lines if line[:8].strip() == label)


@pytest.mark.parametrize(
    ("text", "seconds"), [("24h", 86400.0), ("90m", 5400.0), ("2d", 172800.0), ("600", 600.0)]
)
def test_since_takes_a_duration_with_a_unit(text: str, seconds: float) -> None:
    """`timeline --since` reads 24h, 90m, 2d or plain seconds."""
    assert cli.parse(["timeline", "--since", text])["args"] == {"since": seconds}


@pytest.mark.parametrize("argv", [["timeline", "--since", "soon"], ["timeline", "--since=9w"]])
def test_a_bad_since_is_a_usage_error(argv: list[str]) -> None:
    """A duration that is not one, or longer than the week kept, is refused before connecting."""
    with pytest.raises(cli.Usage, match="--since needs a duration up to a week"):
        cli.parse(argv)


def crowded_result(gpus: int) -> dict[str, Any]:
    """A timeline reply with every state and mark, long incident paths and `gpus` GPUs."""
    path = "/var/lib/train-watchdog/incidents/20261203T195903Z-startup_timeout-and-more"
    states = [*timeline_view.STATES, "someday_state", None]
    events = [*timeline_view.MARKS, "child_spawned"]
    buckets = []
    for i in range(timeline_view.PLOT_COLUMNS):
        event = {"ts": f"2026-12-03T19:{i % 60:02d}:03Z", "event": events[i % len(events)]}
        event |= {"reason": "startup_timeout", "path": path, "exit_code": 1, "delay_s": 600.0}
        buckets.append(
            {
                "ts": "2026-12-03T18:00:00Z",
                "state": states[i % len(states)],
                "tokens_per_s": None if i % 7 == 0 else 1000.0 * (i % 9),
                "step": i,
                "gpus_used_mib": [70000.0] * gpus,
                "gpus_in_use": i % (gpus + 1),
                "gpus_total": gpus,
                "events": [event],
                "events_dropped": 1,
            }
        )
    return {
        "job": "a-job-with-a-rather-long-name-for-a-training-run-of-the-dflash-drafter-pipeline",
        "since": "2026-12-02T20:00:00Z",
        "until": "2026-12-03T20:00:00Z",
        "bucket_s": 981.8,
        "asked_s": 86400.0,
        "buckets": buckets,
        "goodput": {
            "ratio": 0.5,
            "productive_s": 9e4,
            "starting_s": 100,
            "lost_s": {c: 3600.0 + i for i, c in enumerate(LOST_CAUSES)},
        },
    }


@pytest.mark.parametrize("gpus", [8, 16])
def test_a_crowded_day_still_fits_100_columns(gpus: int) -> None:
    """Every state, every mark, long paths, 8 or 16 GPUs: every line fits 100 columns but an
    incident path, which stays whole; colour only when asked, and the text is the same."""
    res = crowded_result(gpus)
    plain = timeline_view.render(res, color=False)
    coloured = timeline_view.render(res, color=True)
    assert "\x1b" not in plain and "\x1b[" in coloured
    assert ESC.sub("", coloured) == plain
    lines = check_screen(plain, {"/var/lib/train-watchdog/incidents/"})
    assert len(lines) <= 40  # one screen
    assert "X" in row(lines, "state") and "?" in row(lines, "state")
    assert set("FGIRCD") <= set(row(lines, "marks"))
    gpu_row = row(lines, "GPUs")
    assert set(gpu_row) <= (set("012345678 ") if gpus == 8 else set("▁▂▃▄▅▆▇█ ")), gpu_row
    assert all(cause in plain for cause in LOST_CAUSES)  # wrapped, not cut


def test_a_bad_bucket_width_exits_78_naming_the_key(tmp_path: pathlib.Path) -> None:
    """timeline.bucket_s under 1 s is a config error: exit 78 with the key path and line."""
    cfg = tmp_path / "watchdog.yaml"
    cfg.write_text(
        json.dumps(base_config(tmp_path, ["/bin/true"]))[:-1] + ', "timeline": {"bucket_s": 0}}'
    )
    r = subprocess.run(
        [str(BIN / "watchdogd"), "--check", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 78 and "timeline.bucket_s" in r.stderr, r.stderr
    assert f"{cfg}:1:" in r.stderr


def test_timeline_without_a_tty_draws_plain_marks_and_lists_the_restarts(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """Piped (no TTY): no escape codes, ≤ 100 columns, the state band, the tok/s sparkline,
    GPUs in use, restart marks, both restarts listed with their cause and exit code, and the
    goodput."""
    d = start_crashing(make_daemon, tmp_path)
    rc, out, err = d.ctl("timeline", "--since", "10m")
    assert rc == 0, err
    assert "\x1b" not in out
    lines = check_screen(out, {str(tmp_path / "state" / "incidents")})  # each exit's bundle
    assert "R" in row(lines, "marks")
    assert "█" in row(lines, "state")  # running
    assert set(row(lines, "tok/s")) <= set("▁▂▃▄▅▆▇█ ")
    assert "2" in row(lines, "GPUs")  # 2 of 2 GPUs in use while it ran
    restarts = [line for line in lines if re.match(r"\s+\d\d:\d\d:\d\d\s+restart\s", line)]
    # SPEC §14: each restart with why the run died (a bare `exit 3` names no cause)
    assert len(restarts) == 2 and all("exited (unknown, code 3)" in r for r in restarts), out
    assert "Restarts 2" in out and "Goodput of the span:" in out


def test_timeline_json_has_the_buckets_behind_the_picture(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """--json: since, bucket_s and buckets with SPEC §13's fields; the restarts are among the
    buckets' events with their reason; tokens/s, step and per-GPU MiB are filled in."""
    d = start_crashing(make_daemon, tmp_path)
    res = timeline_json(d, "--since", "1h")
    assert {"since", "bucket_s", "buckets", "goodput"} <= res.keys()
    assert res["bucket_s"] >= 1
    for b in res["buckets"]:
        assert {"ts", "state", "tokens_per_s", "step", "gpus_used_mib", "events"} <= b.keys()
    assert [e["reason"] for e in all_events(res, "restart_scheduled")] == ["exited", "exited"]
    assert any(b["gpus_used_mib"] == [30000.0, 30000.0] for b in res["buckets"])
    assert max(b["step"] or 0 for b in res["buckets"]) >= 3
    assert "running" in {b["state"] for b in res["buckets"]}


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get tmux)")
def test_timeline_in_a_real_terminal_is_coloured_and_fits(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """In a real terminal (tmux, 120 columns) the picture is coloured, fits 100 columns and
    marks the restarts; the same terminal with NO_COLOR set gets no colour."""
    d = start_crashing(make_daemon, tmp_path)
    server = f"wd-timeline-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", server]
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TMUX")}
    env["TERM"] = "xterm-256color"

    def sh(*args: str) -> str:
        r = subprocess.run([*tmux, *args], capture_output=True, text=True, env=env, timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout

    ctl = f"{BIN / 'watchdogctl'} --socket {d.socket} timeline --since 10m"
    sh("new-session", "-d", "-x", "120", "-y", "60", "-s", "t", "sh")
    try:
        for n, cmd in enumerate([ctl, f"NO_COLOR=1 {ctl}"]):
            sh("send-keys", "-t", "t", "clear", "Enter")
            # What the command printed lies between the marker lines (the typed line wraps).
            sh("send-keys", "-t", "t", f"echo BEGIN-{n}; {cmd}; echo DONE-$?-{n}", "Enter")
            done = f"DONE-0-{n}"
            wait_until(lambda d=done: d in sh("capture-pane", "-p", "-t", "t"), 20, done)
            screen = sh("capture-pane", "-p", "-e", "-t", "t").splitlines()
            plain = [ESC.sub("", line).strip() for line in screen]
            begin = max(i for i, line in enumerate(plain) if line.endswith(f"BEGIN-{n}"))
            printed = screen[begin + 1 : plain.index(done)]
            lines = check_screen("\n".join(printed), {str(tmp_path / "state" / "incidents")})
            assert "R" in row(lines, "marks")
            assert any("\x1b[" in line for line in printed) == (n == 0), printed
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)


def test_a_sigkilled_daemon_loses_no_history(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """After the restarts are on disk, SIGKILL the daemon and start another: its timeline still
    shows both restarts, then the new daemon's start, and the job it adopted keeps running."""
    d = start_crashing(make_daemon, tmp_path)
    on_disk = d.state_dir / "timeline.json"

    def restarts_on_disk() -> int:
        try:
            data = json.loads(on_disk.read_text())
        except (OSError, ValueError):
            return 0
        events = [e for b in data["buckets"] for e in b.get("events", [])]
        return sum(1 for e in events if e["event"] == "restart_scheduled")

    wait_until(lambda: restarts_on_disk() == 2, 10, "both restarts in timeline.json")
    d.wait_saved_job(d.status()["job"]["pid"])  # the job the next daemon adopts
    d.kill()
    d.start()
    d.wait_event("job_adopted", timeout=15)
    res = timeline_json(d, "--since", "1h")
    assert len(all_events(res, "restart_scheduled")) == 2
    names = [e["event"] for b in res["buckets"] for e in b["events"]]
    assert names.count("daemon_started") == 2 and names[-1] == "daemon_started", names
    d.wait_state("running", timeout=30)  # the adopted job, verified healthy again


def test_the_history_outlives_a_reexec(make_daemon: DaemonFactory, tmp_path: pathlib.Path) -> None:
    """`watchdogctl reexec` (the installed code, in place) keeps the picture: both restarts,
    one daemon start (the same daemon went on), then the reexec's own mark."""
    d = start_crashing(make_daemon, tmp_path)
    rc, out, err = d.ctl("reexec")
    assert rc == 0, (out, err, d.output())
    res = wait_until(
        lambda: (
            (r := timeline_json(d, "--since", "1h")) and all_events(r, "daemon_reexecuted") and r
        ),
        10,
        "the reexec's mark in the timeline",
    )
    names = [e["event"] for b in res["buckets"] for e in b["events"]]
    assert names.count("restart_scheduled") == 2 and names.count("daemon_started") == 1, names
    assert names.index("daemon_reexecuted") > max(
        i for i, n in enumerate(names) if n == "restart_scheduled"
    )


def test_a_damaged_history_file_is_set_aside_and_the_picture_starts_afresh(
    make_daemon: DaemonFactory, tmp_path: pathlib.Path
) -> None:
    """A timeline.json that is not one is moved to timeline.json.unreadable (event
    timeline_reset names it), the daemon runs, and the new history is drawn."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "timeline.json").write_text('{"version": 1, "buckets": [{"ts": "torn')
    job = write_script(
        tmp_path / "job.py", "import time\nprint('1.0 tok/s', flush=True)\ntime.sleep(600)\n"
    )
    d = make_daemon([job], {"timeline": {"bucket_s": 1}})
    (reset,) = d.wait_event("timeline_reset")
    assert reset["kept_as"] == str(state / "timeline.json.unreadable")
    assert (state / "timeline.json.unreadable").read_text().endswith('"torn')
    d.wait_state("running", timeout=30)
    res = timeline_json(d, "--since", "1h")
    assert [e["event"] for e in all_events(res, "daemon_started")] == ["daemon_started"]


def test_checkpoint_saves_are_marked_not_listed() -> None:
    """SPEC §16: a column with a save shows `c` (in the legend as checkpoint); the list below
    stays the restarts' (a save every half hour would crowd it out)."""
    res = crowded_result(8)
    save = {"ts": "2026-12-03T19:00:03Z", "event": "checkpoint_saved", "step": 12000}
    res["buckets"] = [dict(b, events=[save]) for b in res["buckets"][:3]]
    text = timeline_view.render(res)
    marks = next(line for line in text.splitlines() if line.lstrip().startswith("marks"))
    assert "ccc" in marks and "c checkpoint" in text, text
    assert "Restarts 0" in text and "12000" not in text.split("Restarts 0")[1]
