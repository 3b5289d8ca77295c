"""The docs made from the code stay true to it: every config key described and in docs/config.md
and watchdog.yaml(5), `watchdogd --print-defaults` a config that loads, the man pages rendering
without a warning, and watchdogctl's bash completion knowing every command and option."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml
from support.harness import BIN, ROOT

from watchdog import config
from watchdog.cli.parse import ARG_OF, OFFLINE
from watchdog.config import reference
from watchdog.core.health import causes
from watchdog.docgen import GENERATED, completion, man, stale
from watchdog.docgen.roff import esc

MAKE_DOCS = "run `make docs` (or .venv/bin/python -m watchdog.docgen) and commit what it writes"
MAN_PAGES = ("man/watchdogd.8", "man/watchdogctl.1", "man/watchdog.yaml.5")
COMPLETION = ROOT / "completions" / "watchdogctl.bash"


def test_every_config_key_has_a_description() -> None:
    """A key added to the schema without its line in keydocs.py fails here, naming the key."""
    missing = reference.missing_docs()
    assert not missing, (
        f"config keys without a description: {', '.join(missing)}. Add one line for each to "
        f"watchdog/config/keydocs.py (what it does, true to the code), then {MAKE_DOCS}"
    )


def test_no_description_outlives_its_key() -> None:
    """A description whose key left the schema (renamed, removed) fails here, naming it."""
    stale_docs = reference.stale_docs()
    assert not stale_docs, (
        f"keydocs.py describes keys the schema does not have: {', '.join(stale_docs)}. "
        f"Remove or rename them in watchdog/config/keydocs.py, then {MAKE_DOCS}"
    )


def test_generated_files_match_the_code() -> None:
    """docs/config.md, the man pages and the completion script are exactly what the code makes
    now: a key, option or command changed without `make docs` fails here."""
    found = stale(str(ROOT))
    assert not found, f"out of step with the code: {', '.join(found)}; {MAKE_DOCS}"


def test_every_key_is_in_the_reference_and_the_man_page() -> None:
    """Each key path of the schema has its row in docs/config.md and its entry in
    watchdog.yaml(5), with its default."""
    md = (ROOT / "docs" / "config.md").read_text()
    page = (ROOT / "man" / "watchdog.yaml.5").read_text()
    for k in reference.all_keys():
        assert f"| `{k.path}` |" in md or f"## `{k.path}`" in md, f"{k.path}: not in docs/config.md"
        assert f"\\fB{esc(k.path)}\\fR" in page or f".SS {esc(k.path)}" in page, k.path
        if k.default and not k.section:
            assert f"`{k.path}` | `{k.default}`" in md, f"{k.path}: default missing"


def _print_defaults() -> str:
    done = subprocess.run(
        [str(BIN / "watchdogd"), "--print-defaults"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout


def _leaf_paths(node: object, prefix: str = "") -> set[str]:
    if not isinstance(node, dict):
        return {prefix}
    out = {prefix} if prefix else set()
    for key, value in node.items():
        out |= _leaf_paths(value, f"{prefix}.{key}" if prefix else str(key))
    return out


def _comment_above(lines: list[str], i: int) -> str:
    """The comment block right above line i, without its `#` marks."""
    above: list[str] = []
    while i > 0 and lines[i - 1].lstrip(" #").strip() and re.match(r"[ #]*# ", lines[i - 1]):
        i -= 1
        above.insert(0, re.sub(r"^[ #]*# ", "", lines[i]))
    return " ".join(above)


def test_print_defaults_names_every_key_with_a_comment() -> None:
    """`watchdogd --print-defaults` writes every key (those of null sections and required ones
    commented out), each under a comment with its description."""
    text = _print_defaults()
    lines = text.splitlines()
    for k in reference.all_keys():
        indent = "  " * k.depth
        spelled = [i for i, line in enumerate(lines) if re.match(rf"[ #]*{k.name}:", line)]
        assert spelled, f"{k.path} is not printed"
        assert any(k.doc in _comment_above(lines, i) for i in spelled), (k.path, indent)
    # Read as the config reader does: keys as written (`on` is no boolean there).
    active = _leaf_paths(yaml.load(text, Loader=yaml.BaseLoader))
    optional = [k.path + "." for k in reference.all_keys() if k.optional_section]
    shown = {
        k.path
        for k in reference.all_keys()
        if not (k.required and not k.section) and not k.path.startswith(tuple(optional))
    }
    assert active == shown, active ^ shown


def test_print_defaults_loads_back_as_the_defaults(tmp_path: pathlib.Path) -> None:
    """The printed defaults, with the one required key (job.command) given as an operator would
    (uncommenting its line), pass `watchdogd --check` and mean exactly what a config giving only
    job.command means: every printed value is the default."""
    text = _print_defaults()
    assert "\n  # command:\n" in text, "job.command is printed commented out, for the operator"
    filled = text.replace("\n  # command:\n", "\n  command: [/bin/true]\n", 1)
    path = tmp_path / "watchdog.yaml"
    path.write_text(filled)
    done = subprocess.run(
        [str(BIN / "watchdogd"), "--check", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    printed = config.parse_config(filled, str(path), check_paths=False)
    minimal = config.parse_config("job: {command: [/bin/true]}\n", str(path), check_paths=False)
    for f in dataclasses.fields(printed):
        assert getattr(printed, f.name) == getattr(minimal, f.name), f.name


def test_print_defaults_null_sections_load_once_uncommented(tmp_path: pathlib.Path) -> None:
    """The commented-out keys of a null section (cluster) are a valid section once uncommented
    and their required values given: the printed layout is one an operator can edit in place."""
    text = _print_defaults().replace("\n  # command:\n", "\n  command: [/bin/true]\n", 1)
    block = re.search(r"^cluster: null\n((?:#.*\n)+)", text, re.MULTILINE)
    assert block is not None
    section = re.sub(r"^# ?", "", block.group(1), flags=re.MULTILINE)
    section = section.replace("etcd:", "etcd: [http://127.0.0.1:2379]").replace(
        "job_id:", "job_id: run1"
    )
    section = section.replace("node_rank:", "node_rank: 0").replace("nodes:", "nodes: 2")
    edited = text.replace(block.group(0), section)
    cfg = config.parse_config(edited, str(tmp_path / "w.yaml"), check_paths=False)
    assert cfg.cluster is not None and cfg.cluster.nodes == 2 and cfg.cluster.lease_ttl_s == 10


def _groff() -> str:
    found = shutil.which("groff")
    if found is None:
        pytest.skip("groff is not installed (apt-get install groff): man pages cannot be rendered")
    return found


@pytest.mark.parametrize("page", MAN_PAGES)
def test_man_page_renders_without_warnings(page: str) -> None:
    """`groff -man -ww -Tutf8` renders each committed man page with every warning on and prints
    nothing on stderr."""
    done = subprocess.run(
        [_groff(), "-man", "-ww", "-Tutf8", "-P-cbou", str(ROOT / page)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "NAME" in done.stdout and "SEE ALSO" in done.stdout


def _render(page: str) -> str:
    done = subprocess.run(
        [_groff(), "-man", "-Tutf8", "-P-cbou", str(ROOT / page)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return " ".join(done.stdout.replace("\u2010\n", "").split())


def test_watchdogctl_page_has_every_command_with_its_exit_codes() -> None:
    """watchdogctl(1) lists every command of the parser with its options and exit codes; a
    command added without its exit codes fails here."""
    assert set(man.CTL_EXITS) == set(man.ctl_commands()), "watchdog/docgen/man.py: CTL_EXITS"
    text = _render("man/watchdogctl.1")
    for name in man.ctl_commands():
        assert re.search(rf"\b{name}\b.*Exit: 0", text), name
    for option in ("--socket", "--json", "--wait", "--timeout", "--follow", "--since", "-n N"):
        assert option in text, option
    assert "3 no job alive" in text and "1 invalid (the old config is kept)" in text
    for code in ("0", "2", "4", "130"):
        assert re.search(rf"\b{code}\b", text.split("EXIT STATUS")[1]), code


def test_watchdogd_page_has_every_option() -> None:
    """watchdogd(8) lists every option of watchdogd's parser, --print-defaults among them."""
    text = _render("man/watchdogd.8")
    parser = man.entry.build_parser("")
    for action in parser._actions:
        if action.help != "==SUPPRESS==":
            for option in action.option_strings:
                assert option in text, option
    assert "--check-reexec" not in text, "a hidden option is not for operators"
    assert "78" in text and "93" in text


def test_watchdogd_page_names_every_cause_with_its_class() -> None:
    """SPEC §14, §15: watchdogd(8) lists every built-in exit cause under its class, and
    docs/causes.md names each one."""
    source = (ROOT / "man" / "watchdogd.8").read_text()
    section = source[source.index(".SH EXIT CAUSES") :].split("\n.SH ")[0]
    listed = dict(re.findall(r"\\fB([a-z]+)\\fR\n([^:]+):", section))
    guide = (ROOT / "docs" / "causes.md").read_text()
    for name, klass in causes.CAUSES.items():
        assert name in listed[klass].split(", "), (name, klass)
        assert f"`{name}`" in guide, name
    assert "EXIT CAUSES" in _render("man/watchdogd.8")


def _complete(*words: str) -> list[str]:
    """What bash offers for `words` (the last one being completed) with the shipped script."""
    script = 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _watchdogctl;'
    script += ' printf "%s\\n" "${COMPREPLY[@]}"'
    done = subprocess.run(
        ["bash", "-c", script, "bash", str(COMPLETION), "watchdogctl", *words],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return [w for w in done.stdout.splitlines() if w]


def test_completion_offers_every_command() -> None:
    """Tab after `watchdogctl` offers exactly the commands the parser takes; `st` narrows them."""
    assert sorted(_complete("")) == sorted([*man.ctl_commands(), *OFFLINE])
    assert _complete("st") == ["status", "start", "stop"]
    assert _complete("--socket", "/tmp/x", "rel") == ["reload"]


def test_completion_offers_each_commands_options() -> None:
    """After a command, its own options (every spelling the parser takes) and the global ones."""
    for name in man.ctl_commands():
        offered = set(_complete(name, "-"))
        own = {opt for opt, arg in ARG_OF.items() if arg in man.protocol.COMMANDS[name].args}
        assert own | {"--json", "--socket"} == offered, name
    assert set(_complete("-")) == set(completion.GLOBAL)
    assert set(_complete("explain", "-")) == {"--exit-code", "--signal", "--json", "--socket"}


def test_completion_offers_since_units() -> None:
    """`timeline --since 24<TAB>` offers 24s … 24w, the units the parser reads; an empty value
    offers ready durations, each one the parser accepts."""
    assert _complete("timeline", "--since", "24") == [f"24{u}" for u in completion.SINCE_UNITS]
    from watchdog.cli.parse import _duration

    for value in _complete("timeline", "--since", ""):
        assert _duration(value) > 0
    for value in _complete("timeline", "--since", "1"):
        assert _duration(value) > 0


def test_completion_is_no_part_of_watchdogctls_start() -> None:
    """The completion is a shell script: nothing of watchdog.docgen is imported by watchdogctl
    (its start path is pinned by tests/test_cli_startup.py)."""
    done = subprocess.run(
        [str(BIN / "python"), "-X", "importtime", "-m", "watchdog.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert "watchdog.docgen" not in done.stderr and "watchdog.config" not in done.stderr


def test_install_puts_man_pages_and_completion_where_they_are_found(tmp_path: pathlib.Path) -> None:
    """`make install`'s docs step copies the three pages to MANDIR's sections, where `man -w`
    finds them, and the completion to COMPLETIONSDIR as `watchdogctl`; uninstall removes them."""
    where = [f"MANDIR={tmp_path}/man", f"COMPLETIONSDIR={tmp_path}/completions"]
    run = ["make", "-s", "-f", str(ROOT / "mk" / "install.mk")]
    done = subprocess.run(
        [*run, "install-docs", *where], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "completions" / "watchdogctl").read_text() == COMPLETION.read_text()
    man_program = shutil.which("man")
    for page, section in (("watchdogd", "8"), ("watchdogctl", "1"), ("watchdog.yaml", "5")):
        assert (tmp_path / "man" / f"man{section}" / f"{page}.{section}").is_file()
        if man_program is not None:  # without man-db the files alone are checked (said below)
            found = subprocess.run(
                [man_program, "-M", str(tmp_path / "man"), "-w", section, page],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert found.returncode == 0, found.stderr
    if man_program is None:
        print("man is not installed (apt-get install man-db): `man -w` was not tried")
    done = subprocess.run(
        [*run, "uninstall-docs", *where], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not list((tmp_path / "man").rglob("*.[158]")), done.stderr
    assert not (tmp_path / "completions" / "watchdogctl").exists()


def test_generated_list_is_what_make_install_ships() -> None:
    """Every generated man page and the completion script are installed by mk/install.mk."""
    mk = (ROOT / "mk" / "install.mk").read_text()
    for rel in GENERATED:
        if rel.startswith("man/"):
            assert pathlib.Path(rel).name in mk, rel
    assert "completions/watchdogctl.bash" in mk


# Written on other branches at the same time as the docs that link them: a link to one of these
# may be dangling until they are merged. Remove each name once its file is in docs/.
MERGED_LATER: set[str] = set()  # pages linked before they exist (none now)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: pathlib.Path) -> set[str]:
    lines, fence = [], False
    for line in path.read_text().splitlines():
        fence = fence != line.startswith("```")
        if not fence and line.startswith("#"):
            lines.append(_slug(line.lstrip("#")))
    return set(lines)


def test_links_between_the_docs_resolve() -> None:
    """Every relative link of README.md and docs/*.md names a file of the tree, and an anchor
    that one of its headings makes (docs written on other branches excepted until merged)."""
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in _LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            rel, _, anchor = target.partition("#")
            dest = (page.parent / rel).resolve() if rel else page
            if not dest.exists():
                if pathlib.Path(rel).name not in MERGED_LATER:
                    broken.append(f"{page.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_readme_is_a_front_page() -> None:
    """The README stays a front page (at most 300 lines) that starts with the two commands and
    links every page of docs/."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert "make demo" in readme and "make test" in readme
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in readme, f"README.md does not link docs/{page.name}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Rule:
    name: str
    pattern: str = "x"


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Sub:
    limit: int = dataclasses.field(default=2, metadata={"ge": 1})


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Top:
    rules: tuple[_Rule, ...] = (_Rule(name="oom"),)
    sub: _Sub = dataclasses.field(default_factory=_Sub)
    maybe: _Sub | None = None


def test_reference_walks_lists_of_rules_and_optional_sections() -> None:
    """A list of dataclasses (a key like `causes: [{name, pattern, class}]`) is one key with its
    items' fields named; a section is walked into; a null section is marked optional."""
    found = {k.path: k for k in reference.all_keys(_Top)}
    assert list(found) == ["rules", "sub", "sub.limit", "maybe", "maybe.limit"]
    assert found["rules"].kind == "list of {name, pattern}" and not found["rules"].section
    assert found["rules"].default == "[{name: oom, pattern: x}]"
    assert found["sub"].section and not found["sub"].optional_section
    assert found["sub.limit"].kind == "integer, ≥ 1" and found["sub.limit"].default == "2"
    assert found["maybe"].optional_section and found["maybe"].default == "null"
