"""`watchdogctl restart --at-checkpoint` under the real daemon (SPEC §16, docs/checkpoints.md):
the old run is stopped only after its next checkpoint is complete, never in the middle of the
save; no save within --timeout exits 1 saying why, and `--or-now` restarts anyway."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

from support.harness import Daemon, base_config, merge, write_script

# Saves checkpoint-3 HF style at once (trainer_state.json last), then trains. While the test's
# `save` flag exists it saves checkpoint-<step>: the weights, then waits for the `finish` flag,
# then trainer_state.json (the completion mark). At SIGTERM it writes down whether a save was
# under way, in a file of its own pid: what the test judges the restart by.
JOB = """
import json, os, signal, sys, time
cwd, out = os.getcwd(), os.path.join(os.getcwd(), "out")
saving = None
def save(step):
    global saving
    folder = os.path.join(out, f"checkpoint-{step}")
    os.makedirs(folder, exist_ok=True)
    saving = step
    open(os.path.join(folder, "model.safetensors"), "wb").write(b"w" * 64)
    while step != 3 and not os.path.exists(os.path.join(cwd, "finish")):
        time.sleep(0.05)
    open(os.path.join(folder, "trainer_state.json"), "w").write(json.dumps({"step": step}))
    saving = None
def term(*_):
    said = "during the save" if saving is not None else "after the save"
    open(os.path.join(cwd, f"term-{os.getpid()}"), "w").write(said)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
save(3)
step = 3
while True:
    step += 1
    print(f"step {step} | 100.0 tok/s", flush=True)
    if os.path.exists(os.path.join(cwd, "save")):
        os.unlink(os.path.join(cwd, "save"))
        save(step)
    time.sleep(0.2)
"""


def daemon(tmp_path: pathlib.Path) -> Daemon:
    cfg = merge(
        base_config(tmp_path, [write_script(tmp_path / "job.py", JOB)]),
        {"progress": {"checkpoint": {"path": str(tmp_path / "out"), "kind": "hf"}}},
    )
    return Daemon(tmp_path, cfg).start()


def first_checkpoint(d: Daemon) -> int:
    """The job's pid once checkpoint-3 is read as its newest complete one."""

    def seen(s: dict[str, Any]) -> dict[str, Any] | None:
        c = s["progress"]["checkpoint"]
        return s if c is not None and c["mark"] == 3 and s["job"]["pid"] else None

    st: dict[str, Any] = d.wait_status(seen, 30, "checkpoint-3 read as the newest")
    return int(st["job"]["pid"])


def ctl_in_background(d: Daemon, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(d.bin / "watchdogctl"), "--socket", d.socket, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_restart_waits_out_the_save_and_follows_it(tmp_path: pathlib.Path) -> None:
    """A save begun, then `restart --at-checkpoint`: the old run is stopped only after the save
    is complete (its checkpoint has trainer_state.json; the job saw no save under way at its
    SIGTERM; checkpoint_saved came before the stop), then a new run starts; exit 0."""
    d = daemon(tmp_path)
    ctl = None
    try:
        old = first_checkpoint(d)
        (tmp_path / "save").write_text("")
        d.wait_status(lambda s: s if not (tmp_path / "save").exists() else None, 30, "save begun")
        ctl = ctl_in_background(d, "restart", "--at-checkpoint", "--timeout", "300")

        def looked(s: dict[str, Any]) -> dict[str, Any] | None:  # or restarted: judged below
            held = s["restarts"]["held"]
            return s if (held and held["reads"] >= 2) or s["job"]["pid"] != old else None

        # two reads of the folder while the save is under way: a restart that did not wait
        # for the save would have happened by now
        st = d.wait_status(looked, 60, "the held restart looked at the folder twice")
        if st["job"]["pid"] == old:  # held, as it must be: status says so
            human = d.ctl("status")[1]
            assert "Held: restart at the next checkpoint · " in human, human
        (tmp_path / "finish").write_text("")  # the save completes only now
        out, err = ctl.communicate(timeout=120)
        assert ctl.returncode == 0, (out, err)
        assert "waiting for the save after step 3" in err, err
        assert "after the checkpoint saved" in out and "new pid" in out, out
        assert (tmp_path / f"term-{old}").read_text() == "after the save"
        saved = [p for p in (tmp_path / "out").glob("checkpoint-*") if p.name != "checkpoint-3"]
        assert len(saved) == 1 and (saved[0] / "trainer_state.json").exists(), saved
        names = [(e["event"], e.get("pid")) for e in d.events()]
        at_save = names.index(("checkpoint_saved", None))
        assert at_save < names.index(("child_stopping", old)), names
        assert d.status()["job"]["pid"] not in (None, old)
    finally:
        if ctl is not None and ctl.poll() is None:
            ctl.kill()
            ctl.wait()
        d.stop()


def test_no_save_within_the_timeout_exits_1_saying_why(tmp_path: pathlib.Path) -> None:
    """No save comes: exit 1 naming the wait and the timeout; the run is left alone."""
    d = daemon(tmp_path)
    try:
        old = first_checkpoint(d)
        rc, out, err = d.ctl("restart", "--at-checkpoint", "--timeout", "2")
        assert rc == 1, (rc, out, err)
        assert "no checkpoint completed within 2 s" in err and "--or-now" in err, err
        st = d.status()
        assert st["job"]["pid"] == old and st["restarts"]["total"] == 0, st
    finally:
        d.stop()


def test_or_now_restarts_at_the_timeout(tmp_path: pathlib.Path) -> None:
    """`--or-now`: no save within the timeout, the restart happens anyway and says so; with
    `--wait`, until the new run is healthy."""
    d = daemon(tmp_path)
    try:
        old = first_checkpoint(d)
        rc, out, err = d.ctl("restart", "--at-checkpoint", "--timeout", "2", "--or-now", "--wait")
        assert rc == 0, (rc, out, err)
        assert "restarted anyway (--or-now)" in out and "healthy, pid" in out, out
        assert d.status()["job"]["pid"] not in (None, old)
    finally:
        d.stop()


def test_without_a_learned_interval_a_timeout_is_asked_for(tmp_path: pathlib.Path) -> None:
    """One checkpoint seen, no interval learned: refused (exit 2) asking for --timeout."""
    d = daemon(tmp_path)
    try:
        old = first_checkpoint(d)
        rc, out, err = d.ctl("restart", "--at-checkpoint")
        assert rc == 2 and "give --timeout S" in err, (rc, out, err)
        assert d.status()["job"]["pid"] == old
    finally:
        d.stop()


def test_or_now_at_its_timeout_waits_out_a_save_under_way(tmp_path: pathlib.Path) -> None:
    """`--or-now` whose timeout comes during a save (its folder seen written, no completion
    mark yet): the restart waits for the save to complete, then comes, and the reply says so;
    the job saw no save under way at its SIGTERM."""
    d = daemon(tmp_path)
    ctl = None
    try:
        old = first_checkpoint(d)

        def phase(s: dict[str, Any]) -> str | None:
            return (s["progress"].get("stall_window") or {}).get("phase")  # type: ignore[no-any-return]

        # checkpoint-3's save over (steps follow), then the next save's write seen
        d.wait_status(lambda s: s if phase(s) != "checkpoint" else None, 30, "training")
        (tmp_path / "save").write_text("")
        d.wait_status(lambda s: s if phase(s) == "checkpoint" else None, 30, "the save seen")
        ctl = ctl_in_background(d, "restart", "--at-checkpoint", "--timeout", "1", "--or-now")

        def moved(s: dict[str, Any]) -> dict[str, Any] | None:  # or restarted: judged below
            held = s["restarts"]["held"]
            return s if (held and held["left_s"] > 5) or s["job"]["pid"] != old else None

        st = d.wait_status(moved, 60, "the held restart's deadline moved for the save")
        assert st["job"]["pid"] == old, "restarted in the middle of the save"
        assert st["restarts"]["held"]["save_wait"], st["restarts"]
        human = d.ctl("status")[1]
        assert "Held: restart once the save under way completes · " in human, human
        (tmp_path / "finish").write_text("")  # the save completes only now
        out, err = ctl.communicate(timeout=120)
        assert ctl.returncode == 0, (out, err)
        assert "a save was under way at the timeout and completed" in out, out
        assert (tmp_path / f"term-{old}").read_text() == "after the save"
    finally:
        if ctl is not None and ctl.poll() is None:
            ctl.kill()
            ctl.wait()
        d.stop()
