"""watchdog.config: the SPEC §6 schema, its errors (file, line, key path) and StrictModes."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import stat
from pathlib import Path

import pytest
from support.configs import MINIMAL, error, parse

from watchdog import config
from watchdog.config import (
    DEFAULT_PATTERN,
    EX_CONFIG,
    ConfigError,
    check_main,
    load_config,
    parse_config,
)

REPO = Path(__file__).resolve().parent.parent
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="StrictModes applies only when running as root (uid 0)"
)


def script(path: Path, mode: int = 0o755) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return path


# --- defaults and the full schema -----------------------------------------------------------


def test_empty_file_reports_job_command_required(tmp_path: Path) -> None:
    """An empty file is all defaults, so the only error is the missing job.command."""
    err = error(tmp_path, "")
    assert (err.key, err.problem, err.line) == ("job.command", "required", None)
    assert str(err) == f"{tmp_path / 'watchdog.yaml'}: job.command: required"


def test_minimal_config_has_spec_defaults(tmp_path: Path) -> None:
    """Every key left out takes the default that SPEC §6 documents."""
    cfg = parse(tmp_path, MINIMAL)
    job = cfg.job
    assert (job.name, job.command, job.shell, job.cwd, dict(job.env)) == (
        "job",
        ("/bin/true",),
        False,
        None,
        {},
    )
    assert (job.log_file, job.pre_start, job.pre_start_timeout_s) == (
        "/var/log/train-watchdog/job.log",
        (),
        120.0,
    )
    assert (job.stop_signal, job.stop_timeout_s) == (signal.SIGTERM, 60.0)
    gpus = cfg.gpus
    assert (gpus.devices, gpus.sample_interval_s, gpus.idle_below_mib, gpus.idle_samples) == (
        "all",
        5.0,
        512.0,
        6,
    )
    assert (gpus.require, gpus.reclaim_timeout_s, gpus.probe_timeout_s) == ("all", 60.0, 5.0)
    prog = cfg.progress
    assert (prog.file, prog.pattern.pattern, prog.stall_after_s) == (None, DEFAULT_PATTERN, 900.0)
    assert (prog.min_tokens_per_s, prog.min_fraction, prog.low_for_s) == (None, 0.3, 300.0)
    assert cfg.startup.timeout_s == 1200.0
    r = cfg.restart
    assert r.on == {"exited", "gpus_idle", "stalled", "startup_timeout"}
    assert (r.backoff_initial_s, r.backoff_factor, r.backoff_max_s, r.jitter) == (10, 2, 600, 0.1)
    assert (r.reset_after_s, r.max_restarts, r.window_s) == (1800.0, 10, 3600.0)
    assert (cfg.incidents.keep, cfg.incidents.pyspy_timeout_s) == (50, 10.0)
    assert (cfg.hooks.on_event, cfg.hooks.timeout_s) == (None, 10.0)
    assert cfg.control.socket == "/run/train-watchdog/control.sock"
    assert (cfg.control.group, cfg.control.operator_group, cfg.metrics.listen) == (None,) * 3
    assert cfg.state_dir == "/var/lib/train-watchdog"
    assert cfg.source == str(tmp_path / "watchdog.yaml")


def test_default_pattern_reads_tokens_per_second() -> None:
    """The default progress pattern captures the number in front of "tok/s" or "tokens/s"."""
    cfg = parse_config(MINIMAL, "/etc/train-watchdog/watchdog.yaml")
    match = cfg.progress.pattern.search("step 12 loss 1.2 9,012.5 tokens/s")
    assert match is not None and match["tokens_per_s"] == "9,012.5"


def test_every_spec_key_parses(tmp_path: Path) -> None:
    """A file that sets every key of SPEC §6 (plus the additions) yields exactly those values."""
    hook = script(tmp_path / "hook.sh")
    (tmp_path / "work").mkdir()
    cfg = parse(
        tmp_path,
        f"""\
        job:
          name: dflash
          command: ["/bin/true", "--flag"]
          cwd: {tmp_path / "work"}
          env: {{PYTHONUNBUFFERED: "1", EMPTY: ""}}
          log_file: /workspace/train.log
          pre_start: [["/bin/true", "x"], "echo hi"]
          pre_start_timeout_s: 30
          stop_signal: SIGINT
          stop_timeout_s: 0.5
        gpus:
          devices: [0, 1, "GPU-8d2c"]
          sample_interval_s: 0.2
          idle_below_mib: 1024
          idle_samples: 3
          require: any
          reclaim_timeout_s: 7
          probe_timeout_s: 2.5
        progress:
          file: /workspace/own.log
          pattern: 'step (?P<step>[0-9]+)'
          stall_after_s: 60
          min_tokens_per_s: 5000
          min_fraction: 1
          low_for_s: 30
        startup:
          timeout_s: 1800
        restart:
          on: [exited, throughput_low]
          backoff_initial_s: 0
          backoff_factor: 1
          backoff_max_s: 0
          jitter: 0
          reset_after_s: 100
          max_restarts: 1
          window_s: 60
        incidents:
          keep: 3
          pyspy_timeout_s: 4
        hooks:
          on_event: {hook}
          timeout_s: 2
        control:
          socket: /run/w.sock
          group: root
          operator_group: root
        metrics:
          listen: "127.0.0.1:9842"
        state_dir: /var/lib/w
        """,
    )
    job = cfg.job
    assert (job.name, job.command, job.cwd) == (
        "dflash",
        ("/bin/true", "--flag"),
        f"{tmp_path}/work",
    )
    assert dict(job.env) == {"PYTHONUNBUFFERED": "1", "EMPTY": ""}
    assert job.pre_start == (("/bin/true", "x"), ("/bin/sh", "-c", "echo hi"))
    assert (job.log_file, job.pre_start_timeout_s) == ("/workspace/train.log", 30.0)
    assert (job.stop_signal, job.stop_timeout_s) == (signal.SIGINT, 0.5)
    assert cfg.gpus == dataclasses.replace(
        cfg.gpus,
        devices=(0, 1, "GPU-8d2c"),
        sample_interval_s=0.2,
        idle_below_mib=1024.0,
        idle_samples=3,
        require="any",
        reclaim_timeout_s=7.0,
        probe_timeout_s=2.5,
    )
    prog = cfg.progress
    assert (prog.file, prog.pattern.pattern, prog.stall_after_s) == (
        "/workspace/own.log",
        "step (?P<step>[0-9]+)",
        60.0,
    )
    assert (prog.min_tokens_per_s, prog.min_fraction, prog.low_for_s) == (5000.0, 1.0, 30.0)
    assert cfg.startup.timeout_s == 1800.0
    r = cfg.restart
    assert r.on == {"exited", "throughput_low"}
    assert (r.backoff_initial_s, r.backoff_factor, r.backoff_max_s, r.jitter) == (0, 1, 0, 0)
    assert (r.reset_after_s, r.max_restarts, r.window_s) == (100.0, 1, 60.0)
    assert (cfg.incidents.keep, cfg.incidents.pyspy_timeout_s) == (3, 4.0)
    assert (cfg.hooks.on_event, cfg.hooks.timeout_s) == (str(hook), 2.0)
    assert (cfg.control.socket, cfg.control.group, cfg.control.operator_group) == (
        "/run/w.sock",
        "root",
        "root",
    )
    assert (cfg.metrics.listen, cfg.state_dir) == ("127.0.0.1:9842", "/var/lib/w")


def test_config_is_frozen(tmp_path: Path) -> None:
    """The loaded config and its env cannot be changed after validation."""
    cfg = parse(tmp_path, MINIMAL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.job.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.job.env["X"] = "1"  # type: ignore[index]


def test_production_example_loads() -> None:
    """etc/watchdog.yaml is a valid config with the DFlash job's production values."""
    cfg = load_config(str(REPO / "etc" / "watchdog.yaml"), check_paths=False)
    assert (cfg.job.command, cfg.job.cwd) == (("/root/run.sh",), "/workspace")
    assert cfg.job.log_file == "/workspace/train.log"
    assert ("rm", "-rf", "/tmp/torchinductor_root") in cfg.job.pre_start
    assert cfg.startup.timeout_s > 1200
    assert cfg.gpus.devices == tuple(range(8))


def test_production_example_writes_every_key() -> None:
    """etc/watchdog.yaml spells out every key the schema has, so operators see them all."""
    text = (REPO / "etc" / "watchdog.yaml").read_text()
    cfg = load_config(str(REPO / "etc" / "watchdog.yaml"), check_paths=False)
    for section in dataclasses.fields(cfg):
        value = getattr(cfg, section.name)
        names = (
            [f.name for f in dataclasses.fields(value)] if dataclasses.is_dataclass(value) else []
        )
        for name in names or [section.name]:
            if name not in {"shell", "source", "pattern_set"}:  # derived, not keys
                assert f"\n  {name}:" in text or f"\n{name}:" in text, name


# --- structural errors ----------------------------------------------------------------------


def test_unknown_nested_key_names_path_and_line(tmp_path: Path) -> None:
    """An unknown key inside a section is reported with its key path, line and a suggestion."""
    err = error(tmp_path, MINIMAL + "gpus:\n  sample_interval_s: 1\n  idle_sample: 3\n")
    assert (err.key, err.line) == ("gpus.idle_sample", 5)
    assert "did you mean 'idle_samples'" in err.problem
    assert str(err).startswith(f"{tmp_path / 'watchdog.yaml'}:5: gpus.idle_sample: unknown key")


def test_unknown_top_level_key(tmp_path: Path) -> None:
    """An unknown top-level section is an error naming it."""
    err = error(tmp_path, MINIMAL + "gpu:\n  devices: all\n")
    assert (err.key, err.line) == ("gpu", 3)


def test_derived_field_is_not_a_key(tmp_path: Path) -> None:
    """`shell` is derived from the command's form and cannot be written in the file."""
    err = error(tmp_path, MINIMAL + "  shell: true\n")
    assert (err.key, err.line) == ("job.shell", 3)


@pytest.mark.parametrize(
    ("text", "key", "line", "words"),
    [
        ("gpus:\n  sample_interval_s: fast\n", "gpus.sample_interval_s", 4, "expected a number"),
        ("gpus:\n  sample_interval_s: true\n", "gpus.sample_interval_s", 4, "a boolean"),
        ("gpus:\n  idle_samples: yes\n", "gpus.idle_samples", 4, "expected an integer"),
        ("gpus:\n  idle_samples: 2.5\n", "gpus.idle_samples", 4, "expected an integer"),
        ("gpus: [1, 2]\n", "gpus", 3, "expected a mapping, got a list"),
        ("job2: 1\n", "job2", 3, "unknown key"),
        ("restart:\n  on: exited\n", "restart.on", 4, "expected a list"),
        ("control:\n  group: 1000\n", "control.group", 4, "quote it"),
        ("gpus:\n  require: some\n", "gpus.require", 4, "expected one of all, any"),
        ("restart:\n  mode: dry\n", "restart.mode", 4, "expected one of act, observe"),
        ("startup:\n  timeout_s: .inf\n", "startup.timeout_s", 4, "finite"),
        ("startup:\n  timeout_s: {a: 1}\n", "startup.timeout_s", 4, "got a mapping"),
        ("job:\n  command: [/bin/true]\n  name: [a]\n", "job.name", 3, "got a list"),
    ],
)
def test_wrong_types_are_errors(tmp_path: Path, text: str, key: str, line: int, words: str) -> None:
    """A value of the wrong YAML type (bool is never a number) is an error at its key and line."""
    body = text if text.startswith("job:") else MINIMAL + text
    err = error(tmp_path, body)
    assert (err.key, err.line) == (key, line)
    assert words in err.problem


def test_int_is_accepted_for_float(tmp_path: Path) -> None:
    """An integer where a duration is expected is that many seconds, as a float."""
    cfg = parse(tmp_path, MINIMAL + "startup:\n  timeout_s: 30\n")
    assert cfg.startup.timeout_s == 30.0 and isinstance(cfg.startup.timeout_s, float)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    """A file whose top level is a list is rejected at line 1."""
    err = error(tmp_path, "- job\n")
    assert err.line == 1 and "top level" in err.problem


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    """The same key twice in a mapping is an error at the second (YAML would keep the last)."""
    err = error(tmp_path, "job:\n  command: [/bin/true]\n  command: [/bin/false]\n")
    assert (err.key, err.line, err.problem) == ("job.command", 3, "duplicate key")


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    """Broken YAML is reported with the line where the parser stopped."""
    err = error(tmp_path, "job:\n  command: [/bin/true\ngpus: {\n")
    assert err.line is not None and "invalid YAML" in err.problem


def test_missing_command_is_blamed_on_job_section(tmp_path: Path) -> None:
    """A job section without command names job.command and the section's line."""
    err = error(tmp_path, "gpus:\n  devices: all\njob:\n  name: x\n")
    assert (err.key, err.problem, err.line) == ("job.command", "required", 4)


@pytest.mark.parametrize("command", ["[]", '""', "'  '", '[""]', "null"])
def test_empty_command_is_an_error(tmp_path: Path, command: str) -> None:
    """An empty argv list, empty string or null command is rejected at job.command."""
    err = error(tmp_path, f"job:\n  command: {command}\n")
    assert (err.key, err.line) == ("job.command", 2)


def test_env_values_must_be_strings(tmp_path: Path) -> None:
    """An unquoted number in job.env is an error at that variable, not a silent str()."""
    err = error(tmp_path, MINIMAL + "  env:\n    CUDA_VISIBLE_DEVICES: 0\n")
    assert (err.key, err.line) == ("job.env.CUDA_VISIBLE_DEVICES", 4)


# --- semantic checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("gpus:\n  sample_interval_s: 0\n", "gpus.sample_interval_s"),
        ("gpus:\n  idle_samples: 0\n", "gpus.idle_samples"),
        ("job:\n  command: [/bin/true]\n  stop_timeout_s: -1\n", "job.stop_timeout_s"),
        ("progress:\n  min_fraction: 0\n", "progress.min_fraction"),
        ("progress:\n  min_fraction: 1.5\n", "progress.min_fraction"),
        ("progress:\n  min_tokens_per_s: 0\n", "progress.min_tokens_per_s"),
        ("restart:\n  backoff_factor: 0.5\n", "restart.backoff_factor"),
        ("restart:\n  backoff_initial_s: -1\n", "restart.backoff_initial_s"),
        ("restart:\n  max_restarts: 0\n", "restart.max_restarts"),
        ("restart:\n  jitter: 1.5\n", "restart.jitter"),
        ("incidents:\n  keep: 0\n", "incidents.keep"),
        ("hooks:\n  timeout_s: 0\n", "hooks.timeout_s"),
    ],
)
def test_out_of_range_numbers_are_errors(tmp_path: Path, text: str, key: str) -> None:
    """Numbers outside their allowed range are errors naming the key and its line."""
    body = text if text.startswith("job:") else MINIMAL + text
    err = error(tmp_path, body)
    assert err.key == key and err.line == body.count("\n") and "must be" in err.problem


def test_backoff_max_below_initial_is_an_error(tmp_path: Path) -> None:
    """restart.backoff_max_s smaller than backoff_initial_s is rejected, even via the default."""
    err = error(tmp_path, MINIMAL + "restart:\n  backoff_initial_s: 1000\n")
    assert err.key == "restart.backoff_max_s" and "backoff_initial_s" in err.problem
    assert err.line == 4  # not in the file: blamed on the restart section


def test_bad_regex_reports_what_re_said(tmp_path: Path) -> None:
    """An invalid progress.pattern is an error quoting the re module's message."""
    err = error(tmp_path, MINIMAL + "progress:\n  pattern: '(?P<step>[0-9+'\n")
    assert (err.key, err.line) == ("progress.pattern", 4)
    assert "invalid regular expression" in err.problem and "position" in err.problem


def test_pattern_without_named_group_is_an_error(tmp_path: Path) -> None:
    """A pattern with neither a tokens_per_s nor a step group cannot report progress."""
    err = error(tmp_path, MINIMAL + "progress:\n  pattern: '([0-9]+) tok/s'\n")
    assert err.key == "progress.pattern" and "tokens_per_s" in err.problem


@pytest.mark.parametrize("reason", ["gpu_lost", "gpu_probe_hung", "progress_unreadable"])
def test_warn_only_reasons_cannot_restart(tmp_path: Path, reason: str) -> None:
    """gpu_lost / gpu_probe_hung / progress_unreadable in restart.on are refused with why."""
    err = error(tmp_path, MINIMAL + f"restart:\n  on: [exited, {reason}]\n")
    assert (err.key, err.line) == ("restart.on[1]", 4) and "warn-only" in err.problem


def test_unknown_restart_reason_is_an_error(tmp_path: Path) -> None:
    """A misspelt reason in restart.on is an error listing the valid ones."""
    err = error(tmp_path, MINIMAL + "restart:\n  on: [exitted]\n")
    assert err.key == "restart.on[0]" and "startup_timeout" in err.problem


@pytest.mark.parametrize(
    ("value", "number"),
    [("SIGTERM", 15), ("TERM", 15), ("sigint", 2), ("INT", 2), ("15", 15), ("SIGUSR1", 10)],
)
def test_stop_signal_names_and_numbers(tmp_path: Path, value: str, number: int) -> None:
    """stop_signal accepts SIGNAME, NAME (any case) and the number, and stores the number."""
    cfg = parse(tmp_path, MINIMAL + f"  stop_signal: {value}\n")
    assert cfg.job.stop_signal == number


@pytest.mark.parametrize("value", ["SIGFOO", "0", "999", "true", "[15]"])
def test_unknown_stop_signal_is_an_error(tmp_path: Path, value: str) -> None:
    """An unknown signal name or number is rejected at job.stop_signal."""
    err = error(tmp_path, MINIMAL + f"  stop_signal: {value}\n")
    assert (err.key, err.line) == ("job.stop_signal", 3)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("all", "all"),
        ("[]", ()),
        ("[0, 3, 7]", (0, 3, 7)),
        ("[GPU-1a2b, MIG-3c4d]", ("GPU-1a2b", "MIG-3c4d")),
        ("[0, GPU-1a2b]", (0, "GPU-1a2b")),
    ],
)
def test_devices_forms(tmp_path: Path, value: str, expected: object) -> None:
    """gpus.devices is 'all', an empty list (no GPU expected), indices or UUIDs."""
    assert parse(tmp_path, MINIMAL + f"gpus:\n  devices: {value}\n").gpus.devices == expected


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("some", "gpus.devices"),
        ("7", "gpus.devices"),
        ("[-1]", "gpus.devices[0]"),
        ("[0, abc]", "gpus.devices[1]"),
        ("[true]", "gpus.devices[0]"),
        ("[1.5]", "gpus.devices[0]"),
        ("[2, 2]", "gpus.devices[1]"),
    ],
)
def test_bad_devices_are_errors(tmp_path: Path, value: str, key: str) -> None:
    """A devices entry that is neither an index >= 0 nor a GPU-/MIG- UUID is an error at it."""
    err = error(tmp_path, MINIMAL + f"gpus:\n  devices: {value}\n")
    assert (err.key, err.line) == (key, 4)


@pytest.mark.parametrize("listen", ["127.0.0.1:9842", "[::1]:9842", "localhost:1", "h:65535"])
def test_metrics_listen_accepts_host_port(tmp_path: Path, listen: str) -> None:
    """metrics.listen takes host:port, with IPv6 hosts in brackets."""
    assert parse(tmp_path, MINIMAL + f"metrics:\n  listen: '{listen}'\n").metrics.listen == listen


@pytest.mark.parametrize("listen", ["9842", "host:0", "host:65536", "host:http", ":9842", "::1:80"])
def test_metrics_listen_rejects_bad_forms(tmp_path: Path, listen: str) -> None:
    """metrics.listen without a host, or with a port outside 1..65535, is an error."""
    err = error(tmp_path, MINIMAL + f"metrics:\n  listen: '{listen}'\n")
    assert (err.key, err.line) == ("metrics.listen", 4)


def test_the_metrics_endpoint_binds_what_the_config_accepted(tmp_path: Path) -> None:
    """One listen parser: the endpoint splits metrics.listen with the very function the config
    validated it with, so an address the config accepts always binds as written."""
    from watchdog.outputs import metrics

    cfg = parse(tmp_path, MINIMAL + "metrics:\n  listen: '[::1]:9842'\n")
    assert metrics.parse_listen is config.parse_listen
    assert config.parse_listen(str(cfg.metrics.listen)) == ("::1", 9842)


def test_overlong_socket_path_is_an_error(tmp_path: Path) -> None:
    """A control.socket path that cannot fit in sockaddr_un is refused before bind() would fail."""
    err = error(tmp_path, MINIMAL + f"control:\n  socket: /run/{'s' * 120}.sock\n")
    assert (err.key, err.line) == ("control.socket", 4)


# --- commands, paths and the filesystem -----------------------------------------------------


def test_string_command_runs_under_sh(tmp_path: Path) -> None:
    """A string command becomes /bin/sh -c STRING, and its program is not looked up."""
    cfg = parse(tmp_path, "job:\n  command: 'cd /x && ./missing.sh --fast'\n")
    assert cfg.job.command == ("/bin/sh", "-c", "cd /x && ./missing.sh --fast")
    assert cfg.job.shell is True


def test_missing_program_is_an_error(tmp_path: Path) -> None:
    """An argv command whose program does not exist is rejected at job.command."""
    err = error(tmp_path, f"job:\n  command: [{tmp_path / 'nope.sh'}]\n")
    assert (err.key, err.line) == ("job.command", 2) and "no such file" in err.problem


def test_non_executable_program_is_an_error(tmp_path: Path) -> None:
    """An argv command whose program lacks the execute bit is rejected with a hint."""
    run = script(tmp_path / "run.sh", mode=0o644)
    err = error(tmp_path, f"job:\n  command: [{run}]\n")
    assert err.key == "job.command" and "not executable" in err.problem


def test_directory_as_program_is_an_error(tmp_path: Path) -> None:
    """A folder is not a program even though it has the x bit."""
    err = error(tmp_path, f"job:\n  command: [{tmp_path}]\n")
    assert err.key == "job.command" and "not a regular file" in err.problem


def test_bare_program_is_searched_on_path(tmp_path: Path) -> None:
    """A bare program name is found on PATH (job.env's PATH first) and stays bare for execvp."""
    script(tmp_path / "mytrainer")
    cfg = parse(tmp_path, f"job:\n  command: [mytrainer]\n  env: {{PATH: '{tmp_path}'}}\n")
    assert cfg.job.command == ("mytrainer",)
    err = error(tmp_path, "job:\n  command: [no-such-trainer-anywhere]\n")
    assert "no such executable on PATH" in err.problem


def test_pre_start_and_hook_programs_are_checked(tmp_path: Path) -> None:
    """argv pre_start items and hooks.on_event must name executable files too."""
    err = error(tmp_path, MINIMAL + "  pre_start: ['echo ok', [/no/such/prog]]\n")
    assert (err.key, err.line) == ("job.pre_start[1]", 3)
    err = error(tmp_path, MINIMAL + "hooks:\n  on_event: missing-hook.sh\n")
    assert (err.key, err.line) == ("hooks.on_event", 4)


def test_missing_cwd_is_an_error(tmp_path: Path) -> None:
    """job.cwd must be an existing folder."""
    err = error(tmp_path, MINIMAL + "  cwd: no-such-dir\n")
    assert (err.key, err.line) == ("job.cwd", 3) and str(tmp_path / "no-such-dir") in err.problem


def test_unknown_group_is_an_error(tmp_path: Path) -> None:
    """control.group / operator_group must name groups that exist."""
    err = error(tmp_path, MINIMAL + "control:\n  operator_group: no-such-group-xyz\n")
    assert (err.key, err.line) == ("control.operator_group", 4)


def test_check_paths_false_skips_filesystem_checks(tmp_path: Path) -> None:
    """With check_paths=False a config naming absent programs, folders and groups still loads."""
    cfg = parse(
        tmp_path,
        "job:\n  command: [/no/run.sh]\n  cwd: /no/dir\n  pre_start: [[/no/x]]\n"
        "hooks:\n  on_event: /no/hook\ncontrol:\n  group: no-such-group-xyz\n",
        check_paths=False,
    )
    assert cfg.job.command == ("/no/run.sh",) and cfg.control.group == "no-such-group-xyz"


def test_relative_paths_resolve_against_config_folder(tmp_path: Path) -> None:
    """Relative file paths in the config are taken from the config file's folder, not the cwd."""
    (tmp_path / "work").mkdir()
    script(tmp_path / "work" / "run.sh")
    script(tmp_path / "hook.sh")
    cfg = parse(
        tmp_path,
        """\
        job:
          command: [./run.sh, --x]
          cwd: work
          log_file: logs/job.log
          pre_start: [[./run.sh], [env]]
        progress:
          file: ../elsewhere/train.log
        hooks:
          on_event: hook.sh
        control:
          socket: run/control.sock
        state_dir: state
        """,
    )
    assert cfg.job.cwd == f"{tmp_path}/work"
    # A relative program runs from job.cwd, so it is made absolute against it; a bare pre_start
    # name is resolved on PATH once, at load (what is checked is what runs: issue 15, item 4).
    assert cfg.job.command == (f"{tmp_path}/work/run.sh", "--x")
    assert cfg.job.pre_start == ((f"{tmp_path}/work/run.sh",), (shutil.which("env"),))
    assert cfg.job.log_file == f"{tmp_path}/logs/job.log"
    assert cfg.progress.file == f"{tmp_path.parent}/elsewhere/train.log"
    assert cfg.hooks.on_event == f"{tmp_path}/hook.sh"
    assert cfg.control.socket == f"{tmp_path}/run/control.sock"
    assert cfg.state_dir == f"{tmp_path}/state"


def test_relative_program_without_cwd_uses_config_folder(tmp_path: Path) -> None:
    """With no job.cwd a relative program is found next to the config file."""
    script(tmp_path / "run.sh")
    cfg = parse(tmp_path, "job:\n  command: [bin/../run.sh]\n")
    assert cfg.job.command == (f"{tmp_path}/run.sh",)


def test_load_config_reads_file_and_reports_unreadable(tmp_path: Path) -> None:
    """load_config validates a file on disk; a missing file is a ConfigError, not an OSError."""
    path = tmp_path / "watchdog.yaml"
    path.write_text(MINIMAL)
    assert load_config(str(path)).source == str(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "absent.yaml"))


# --- StrictModes ----------------------------------------------------------------------------


@needs_root
def test_load_config_refuses_writable_config_file(tmp_path: Path) -> None:
    """As root, a config file that others can write is refused (SPEC §6 StrictModes)."""
    path = tmp_path / "watchdog.yaml"
    path.write_text(MINIMAL)
    path.chmod(0o666)
    with pytest.raises(ConfigError, match="refused while running as root") as info:
        load_config(str(path))
    assert info.value.path == str(path)
    assert load_config(str(path), check_paths=False).job.command == ("/bin/true",)


@needs_root
def test_writable_hook_and_pre_start_are_refused(tmp_path: Path) -> None:
    """As root, a hook or argv pre_start program that others can write is refused at its key."""
    unsafe = script(tmp_path / "unsafe.sh")
    unsafe.chmod(unsafe.stat().st_mode | stat.S_IWOTH)
    err = error(tmp_path, MINIMAL + f"hooks:\n  on_event: {unsafe}\n")
    assert err.key == "hooks.on_event" and "refused while running as root" in err.problem
    err = error(tmp_path, MINIMAL + f"  pre_start: [[{unsafe}]]\n")
    assert err.key == "job.pre_start[0]" and "writable by group or others" in err.problem


@needs_root
def test_job_command_is_not_held_to_strict_modes(tmp_path: Path) -> None:
    """SPEC §6 guards the config, hooks and pre_start; the job's own program is the operator's."""
    run = script(tmp_path / "run.sh", mode=0o777)
    assert parse(tmp_path, f"job:\n  command: [{run}]\n").job.command == (str(run),)


# --- check_main -----------------------------------------------------------------------------


def test_check_main_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """check_main prints "config OK: <path>" and returns 0 for a valid file."""
    path = tmp_path / "watchdog.yaml"
    path.write_text(MINIMAL)
    assert check_main(str(path)) == 0
    out, err = capsys.readouterr()
    assert (out, err) == (f"config OK: {path}\n", "")


def test_check_main_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """check_main prints the error to stderr and returns 78 (EX_CONFIG) for an invalid file."""
    path = tmp_path / "watchdog.yaml"
    path.write_text(MINIMAL + "gpus:\n  idle_samples: 0\n")
    assert check_main(str(path)) == EX_CONFIG == 78
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"{path}:4: gpus.idle_samples: must be at least 1, got 0\n"
