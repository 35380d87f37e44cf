"""The README's quick tour runs as written, and every command the README and docs/ name exists with the options they
give it.

The tour's commands run in order through the real CLI, in a fresh temporary home (as on a fresh clone), and each
output line the README shows must be among the lines the command prints. The slow ones are listed by name in SLOW
and run only with RERANK_SLOW_TESTS=1.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
TOUR_HEADING = "## A quick tour"

# Tour commands that take minutes on 2 cores (by their start): skipped unless RERANK_SLOW_TESTS=1, for the reason given.
SLOW = {
    "rerank score --model minilm-bi": "re-scores 4,300 DL 2019 pairs with MiniLM: minutes on 2 cores",
    "rerank eval BM25=dl-bm25.run BI=dl-bi.run": "needs the minilm-bi run, which takes minutes on 2 cores",
    "rerank budget": "needs the minilm-bi run, which takes minutes on 2 cores",
    "rerank run pipelines/vaswani-bm25.toml": "four Lucene searches and a leaderboard: half a minute or more",
}
# Commands whose output names times, which vary by machine: their lines are compared with every number left out.
TIMED = ("rerank budget",)
RUN_SLOW = os.environ.get("RERANK_SLOW_TESTS") == "1"


def tour_section(text: str) -> str:
    start = text.index(TOUR_HEADING)
    end = text.find("\n## ", start + len(TOUR_HEADING))
    return text[start:end if end >= 0 else len(text)]


def tour_steps(text: str) -> list[tuple[str, list[str]]]:
    """The tour's `console` blocks as (command, the output lines shown after it). A trailing backslash continues a
    command; `...` marks where output was cut."""
    steps: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", tour_section(text), re.S):
        continued = False
        for line in block.splitlines():
            if continued:
                steps[-1] = (steps[-1][0][:-1].rstrip() + " " + line.strip(), steps[-1][1])
            elif line.startswith("$ "):
                steps.append((line[2:].strip(), []))
            elif steps and line.strip() and line.strip() != "...":
                steps[-1][1].append(line.rstrip())
            continued = bool(steps) and steps[-1][0].endswith("\\") and not steps[-1][1]
    return steps


def _without_numbers(line: str) -> str:
    return " ".join(re.sub(r"\d+(\.\d+)?", "#", line).split())


def _without_comment(command: str) -> str:
    return command.split("  #", 1)[0].strip()


STEPS = tour_steps(README.read_text())


def slow_reason(command: str) -> str | None:
    return next((reason for start, reason in SLOW.items() if command.startswith(start)), None)


def test_the_tour_is_parsed_and_every_slow_entry_names_a_command_of_it():
    commands = [command for command, _ in STEPS]
    assert len(commands) >= 8 and commands[0].startswith("rerank ")
    assert all(not command.endswith("\\") for command in commands)
    stale = [start for start in SLOW if not any(command.startswith(start) for command in commands)]
    assert not stale, f"SLOW names commands that the tour no longer has: {stale}"


@pytest.fixture(scope="module")
def tour_home(tmp_path_factory, data_root):
    """A fresh folder as home and working directory, with the repository's pipelines beside it (as in a clone), and
    `rerank` on PATH as this Python's."""
    home = tmp_path_factory.mktemp("tour")
    (home / "pipelines").symlink_to(REPO / "pipelines")
    bin_dir = home / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "rerank"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rerank "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "RERANK_HOME": str(home), "RERANK_DATA": str(data_root), "HF_HUB_OFFLINE": "1",
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return home, env


@pytest.mark.data
@pytest.mark.java
@pytest.mark.parametrize("step", range(len(STEPS)), ids=[f"{i:02d} {c[:60]}" for i, (c, _) in enumerate(STEPS)])
def test_tour_command_runs_as_written(step, tour_home):
    command, shown = STEPS[step]
    reason = slow_reason(command)
    if reason and not RUN_SLOW:
        pytest.skip(f"slow ({reason}); RERANK_SLOW_TESTS=1 runs it")
    home, env = tour_home
    done = subprocess.run(["bash", "-o", "pipefail", "-c", _without_comment(command)], cwd=home, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    same = _without_numbers if command.startswith(TIMED) else str.rstrip
    printed = {same(line) for line in (done.stdout + done.stderr).splitlines()}
    missing = [line for line in shown if same(line) not in printed]
    assert not missing, f"{command} no longer prints these README lines:\n" + "\n".join(missing) + \
        f"\n--- it printed:\n{done.stdout}{done.stderr}"


# --- every command and option named in the README and docs/ exists -------------------------------------------------

def named_invocations() -> list[tuple[str, list[str], list[str]]]:
    """(file, command words, options) of each `rerank ...` in an indented or fenced code line of README and docs/."""
    found = []
    for path in [README, *DOCS]:
        lines = path.read_text().splitlines()
        for at, line in enumerate(lines):
            code = line.strip().removeprefix("$ ")
            if not code.startswith("rerank ") or not (line.startswith("    ") or line.startswith("$ ")):
                continue
            while code.endswith("\\") and at + 1 < len(lines):  # a command continued on the next line
                at += 1
                code = code[:-1] + " " + lines[at].strip()
            for segment in _without_comment(code).split("|"):
                words = shlex.split(segment, comments=True) if "rerank" in segment else []
                if not words or words[0] != "rerank":
                    continue
                words = [w for w in words[1:] if w != "..."]
                while words and words[0].startswith("--"):  # rerank's own options (--data-root DIR)
                    words = words[2:] if words[0] == "--data-root" else words[1:]
                if words and not words[0].isupper():  # `rerank COMMAND ...` names no command
                    command = words[:2] if words[0] == "data" else words[:1]
                    options = [w.split("=", 1)[0] for w in words if w.startswith("-") and w != "-"]
                    found.append((path.name, command, options))
    return found


def test_every_command_and_option_the_docs_name_exists():
    from click.testing import CliRunner

    from rerank.cli import cli
    from rerank.cli import commands  # noqa: F401  (registers the commands)

    invocations = named_invocations()
    assert len(invocations) > 50
    helped, wrong = set(), []
    for source, command, options in invocations:
        group, name = (cli.commands["data"], command[1]) if command[0] == "data" else (cli, command[0])
        target = group.commands.get(name) if hasattr(group, "commands") else None
        if target is None:
            wrong.append(f"{source}: rerank {' '.join(command)} is no command")
            continue
        if tuple(command) not in helped:
            result = CliRunner().invoke(cli, [*command, "--help"])
            assert result.exit_code == 0 and "Usage:" in result.output, result.output
            helped.add(tuple(command))
        known = {opt for param in target.params for opt in (*param.opts, *param.secondary_opts)}
        wrong += [f"{source}: rerank {' '.join(command)} has no option {option}"
                  for option in options if option not in known]
    assert not wrong, "\n".join(sorted(set(wrong)))


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_the_readme_and_docs_resolve():
    broken = []
    for path in [README, *DOCS]:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", path.read_text()):
            if target.startswith("http"):
                continue
            linked = (path.parent / target) if target else path
            if not linked.exists():
                broken.append(f"{path.name}: {target} does not exist")
            elif anchor and anchor not in {_anchor(line.lstrip("#")) for line in linked.read_text().splitlines()
                                           if line.startswith("#")}:
                broken.append(f"{path.name}: {target or path.name} has no heading #{anchor}")
    assert not broken, "\n".join(broken)
