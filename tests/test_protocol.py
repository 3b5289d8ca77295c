"""The pure control protocol (SPEC §8): framing, checks, the JSON codec, reply descriptions."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchdog.core.protocol import wire as P
from watchdog.core.views import replies as R


def req(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def error_type(line: bytes) -> str:
    with pytest.raises(P.ProtocolError) as e:
        P.decode_request(line)
    return e.value.type


# ------------------------------------------------------------------------------ requests


def test_request_round_trips_through_encode_and_decode() -> None:
    """encode_request's line decodes to the same id, command and arguments."""
    line = P.encode_request(7, "events", {"n": 5, "follow": True})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert P.decode_request(line) == P.Request(7, "events", {"n": 5, "follow": True})


def test_spec_example_request_is_accepted() -> None:
    """SPEC §8's own example request decodes."""
    assert P.decode_request(b'{"v":1,"id":7,"cmd":"status","args":{}}\n').cmd == "status"


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (b"{not json\n", "bad_json"),
        (b"\xff\xfe\n", "bad_json"),
        (b"[" * 60_000 + b"\n", "bad_json"),
        (b'{"v":1} trailing\n', "bad_json"),
        (req([1, 2]), "bad_request"),
        (req({"v": 1, "id": True, "cmd": "status"}), "bad_request"),
        (req({"v": 1, "id": [1], "cmd": "status"}), "bad_request"),
        (req({"v": 2, "id": 1, "cmd": "status"}), "bad_version"),
        (req({"id": 1, "cmd": "status"}), "bad_version"),
        (req({"v": 1, "id": 1, "cmd": "rm -rf"}), "unknown_command"),
        (req({"v": 1, "id": 1, "cmd": "status", "args": []}), "bad_request"),
        (b"x" * (P.MAX_LINE_BYTES + 1), "too_large"),
    ],
)
def test_malformed_requests_get_a_typed_error(line: bytes, kind: str) -> None:
    """Junk, non-UTF-8, deep nesting, wrong types, versions and commands raise ProtocolError."""
    assert error_type(line) == kind


@pytest.mark.parametrize(
    "args",
    [
        {"n": -1},
        {"n": 2.5},
        {"n": "10"},
        {"n": True},
        {"follow": 1},
        {"bogus": 1},
    ],
)
def test_events_arguments_are_checked(args: dict[str, object]) -> None:
    """Every argument is checked against its kind; unknown names are refused."""
    assert error_type(req({"v": 1, "id": 1, "cmd": "events", "args": args})) == "bad_request"


@pytest.mark.parametrize("timeout", [0, -1, math.inf, "5", False, 8 * 86400])
def test_restart_timeout_must_be_positive_bounded_seconds(timeout: object) -> None:
    """restart's timeout is a number of seconds in (0, a week]."""
    line = P.encode_request(1, "restart", {"timeout": timeout})
    assert error_type(line) == "bad_request"


def test_counts_are_capped_and_null_means_default() -> None:
    """A huge -n is capped (no reply can grow without bound); null arguments are dropped."""
    r = P.decode_request(P.encode_request(1, "logs", {"n": 10**9, "follow": None}))
    assert r.args == {"n": P.MAX_LOG_LINES}


def test_error_keeps_the_request_id_when_it_was_readable() -> None:
    """A client can match an error to its request once the id could be read."""
    with pytest.raises(P.ProtocolError) as e:
        P.decode_request(req({"v": 1, "id": "abc", "cmd": "nope"}))
    assert e.value.req_id == "abc"


def test_every_mutating_command_is_marked() -> None:
    """The command table marks exactly the commands SPEC §8 (and §12: reexec; §16: notify test,
    which reaches the operator's phone) lets only operators run."""
    mutating = {name for name, spec in P.COMMANDS.items() if spec.mutating}
    ops = {"start", "stop", "restart", "pause", "resume", "reload", "reexec", "notify"}
    assert mutating == ops


# ------------------------------------------------------------------------------- replies


def test_replies_have_spec_shape() -> None:
    """ok and error replies are one line each, in SPEC §8's shape, and decode_reply reads them."""
    ok = P.ok_reply(3, {"a": 1})
    assert json.loads(ok) == {"v": 1, "id": 3, "ok": True, "result": {"a": 1}}
    bad = P.error_reply(4, "refused", "already running", {"state": "running"})
    assert json.loads(bad) == {
        "v": 1,
        "id": 4,
        "ok": False,
        "error": {"type": "refused", "message": "already running"},
        "result": {"state": "running"},
    }
    assert P.decode_reply(bad)["error"]["type"] == "refused"


@pytest.mark.parametrize("line", [b"nope\n", b"[]\n", b'{"ok": true}\n', b'{"ok": false}\n'])
def test_decode_reply_rejects_what_is_not_a_reply(line: bytes) -> None:
    """A reply without ok/result/error is reported, never half-used."""
    with pytest.raises(P.ProtocolError):
        P.decode_reply(line)


# ---------------------------------------------------------------------------------- JSON

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_codec_agrees_with_the_json_module(value: object) -> None:
    """dumps/loads (over _json) read and write exactly what the json module does."""
    text = P.dumps(value)
    assert json.loads(text) == value
    assert P.loads(text) == value
    assert P.loads(json.dumps(value, indent=2)) == value


def test_codec_writes_unknown_values_as_strings() -> None:
    """Values JSON cannot hold (a path, a set) are written as their str(), never an error."""
    assert json.loads(P.dumps({"p": P.Request})) == {"p": str(P.Request)}


@pytest.mark.parametrize("text", ["", " ", "{", "[1] 2", '{"a" 1}', '"\x01"', "nul"])
def test_loads_raises_value_error_for_bad_documents(text: str) -> None:
    """Every malformed document is a ValueError (also on Python 3.11's C scanner)."""
    with pytest.raises(ValueError):
        P.loads(text)


def test_cli_modules_import_nothing_heavy() -> None:
    """watchdogctl's imports stay off json, re, socket, enum, typing and asyncio (start-up time)."""
    code = (
        "import sys; before = set(sys.modules); import watchdog.cli; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    root = pathlib.Path(__file__).resolve().parent.parent
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    out = run.stdout.split()
    heavy = {"json", "re", "socket", "enum", "typing", "asyncio", "argparse", "dataclasses"}
    assert not heavy & set(out), out
    assert set(out) <= {
        "watchdog",
        "watchdog.cli",
        "watchdog.cli.client",
        "watchdog.cli.commands",
        "watchdog.cli.parse",
        "watchdog.cli.render",
        "watchdog.core",
        "watchdog.core.protocol",
        "watchdog.core.protocol.wire",
        "watchdog.core.protocol.jsoncodec",
        "_socket",
        "__future__",
    }


# ------------------------------------------------------------------ what a reply reports


def ev(event: str, **fields: object) -> dict[str, object]:
    return {"ts": "2026-01-01T00:00:00.000Z", "event": event, **fields}


def test_describe_stop_names_the_signal_and_a_sigkill() -> None:
    """A graceful stop names the signal; a SIGKILL after the timeout says the job ignored it."""
    graceful = [ev("child_stopping", pid=7), ev("child_exited", pid=7, signal=15)]
    assert R.describe_stop(7, graceful, "SIGTERM", 0.25) == "pid 7 killed by SIGTERM in 0.2 s"
    forced = [ev("child_exited", pid=7, signal=9), ev("child_killed", pid=7, signal=9)]
    text = R.describe_stop(7, forced, "SIGTERM", None)
    assert text == "pid 7 ignored SIGTERM: SIGKILLed (killed by SIGKILL)"
    left = [*forced, ev("leftovers_found", count=2)]
    # SPEC §14: never "survived SIGKILL": a process forked after a pass was never sent one
    assert "2 processes still alive after the stop" in R.describe_stop(7, left, "SIGTERM", None)
    assert R.describe_stop(None, [], "SIGTERM", 1.0) == "no job was running"
    assert R.describe_stop(7, [ev("child_exited", pid=7, exit_code=0)], "SIGINT", None) == (
        "pid 7 exit code 0"
    )


def status_of(pid: int | None, gpus: list[dict[str, object]], age: float | None) -> dict[str, Any]:
    return {
        "state": "starting",
        "reasons": [],
        "job": {"pid": pid},
        "gpus": gpus,
        "progress": {"last_progress_age_s": age},
    }


def why_not_healthy(
    pid: int, st: dict[str, Any], history: list[dict[str, Any]], waited_s: float, used: set[int]
) -> str:
    """The reason line of not_healthy_report()."""
    return str(R.not_healthy_report(pid, st, history, waited_s, used)["reason"])


def test_why_not_healthy_reports_a_death_with_its_code() -> None:
    """A job that exited by itself during startup: 'died during startup (exit code 3)'."""
    hist = [ev("child_spawned", pid=9), ev("child_exited", pid=9, exit_code=3, reason="exited")]
    why = why_not_healthy(9, status_of(None, [], None), hist, 1.0, set())
    assert why == "the job died during startup (exit code 3)"


def test_why_not_healthy_reports_the_detector_that_stopped_it() -> None:
    """A job the watchdog stopped (startup_timeout) is reported with that reason."""
    hist = [
        ev("detector_fired", pid=9, reason="startup_timeout"),
        ev("child_stopping", pid=9, reason="startup_timeout"),
        ev("child_exited", pid=9, signal=15, reason="startup_timeout"),
    ]
    why = why_not_healthy(9, status_of(None, [], None), hist, 1.0, set())
    assert why == "startup_timeout: stopped by the watchdog, killed by SIGTERM"
    gpus = [{"index": i, "used_mib": 0, "idle": True} for i in range(8)]
    report = R.not_healthy_report(9, status_of(None, gpus, None), hist, 1.0, set())
    assert report["verdict"] == "startup_timeout"
    assert report["reason"] == (
        "startup_timeout: 0/8 GPUs hold memory; stopped by the watchdog, killed by SIGTERM"
    )
    assert (report["gpus_in_use"], report["gpus_expected"]) == (0, 8)


def test_why_not_healthy_at_the_deadline_names_idle_gpus_and_missing_progress() -> None:
    """Still alive at the deadline: which GPUs were never used, and that no progress came."""
    gpus = [
        {"index": 0, "used_mib": 0, "idle": True},
        {"index": 1, "used_mib": 70000, "idle": False},
    ]
    report = R.not_healthy_report(9, status_of(9, gpus, None), [], 2.0, {1})
    assert report["reason"] == ("not healthy after 2.0 s: 1/2 GPUs hold memory; no progress line")
    assert report["verdict"] == "gpus_not_in_use"
    assert P.gpu_figures_text(report["gpu_figures"]) == "GPU 0 0 MiB · GPU 1 70,000 MiB (in use)"
    why = why_not_healthy(9, status_of(9, gpus, 0.5), [], 2.0, {0, 1})
    assert why == "not healthy after 2.0 s: state starting"  # both seen in use while waiting


def test_an_unknown_exit_status_is_said_in_words() -> None:
    """A child_exited with neither code nor signal reads 'exit status unknown', never 'None'."""
    assert R.exit_text({"exit_code": None, "signal": None}) == "exit status unknown"
    assert R.exit_text({"exit_code": 3, "signal": None}) == "exit code 3"


def test_restart_at_checkpoint_says_what_it_waits_for() -> None:
    """SPEC §16: the save after the newest checkpoint, its interval and age, and the wait:
    twice the learned interval unless --timeout; none without an interval."""
    ck = {"step": 12_000, "every_s": 1800.0, "age_s": 1560.0, "mark": 12_000}
    assert P.save_wait_s(ck, None) == 3600.0 and P.save_wait_s(ck, 60.0) == 60.0
    assert P.save_wait_s({"every_s": None}, None) is None and P.save_wait_s(None, None) is None
    said = "waiting for the save after step 12,000 (every ~30 min; the last 26 min ago)"
    assert P.save_awaited(ck, 3600.0) == f"{said}, up to 1 h 00 min"
    assert (
        P.save_awaited(None, 90.0)
        == "waiting for the next save (no checkpoint seen yet), up to 1 min"
    )
    with pytest.raises(P.ProtocolError, match="or_now goes with at_checkpoint"):
        P.check_args("restart", {"or_now": True})
