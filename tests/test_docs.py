"""The README and the chapters in docs/ stay true to the tool and to the tree.

- every ``dlsched ...`` command line they show (in code blocks, ``$ dlsched`` console lines and lines
  continued with ``\\``, and inline code) names a command of :data:`dlsched.cli.main.cli` and only
  options that command has, read from click's own command objects;
- README.md fits on a screen (at most 80 lines);
- mkdocs.yml's nav names only pages that exist, and every page is in it;
- every relative link and image points at a file that exists;
- the prose states what is, with no diary sentences.

``mkdocs build --strict`` (``make docs``, part of ``make test``) checks the rendering.
"""
from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
import yaml

from dlsched.cli.main import cli
from tests.conftest import REPO

DOCS = REPO / "docs"
README = REPO / "README.md"
MAX_README_LINES = 80  # one screen

# Phrases that tell the history of the project instead of how it is. Checked in prose, not in pasted output.
DIARY = ("until this wave", "this wave", "this session", "used to", "no longer", "was fixed", "earlier run",
         "before the fix", "not yet", "as of now", "for now")

FENCE = re.compile(r"^(```|~~~)")
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE = re.compile(r"`([^`\n]+)`")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _split(text: str) -> tuple[list[list[str]], list[str]]:
    """A page's fenced code blocks (each a list of lines) and its prose lines."""
    blocks: list[list[str]] = []
    prose: list[str] = []
    block: list[str] | None = None
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            if block is None:
                block = []
            else:
                blocks.append(block)
                block = None
        elif block is None:
            prose.append(line)
        else:
            block.append(line)
    assert block is None, "a code block is never closed"
    return blocks, prose


def _joined(lines: list[str]) -> list[str]:
    """Lines with their ``\\`` continuations joined."""
    out: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            out.append(pending + line)
            pending = ""
    if pending:
        out.append(pending)
    return out


def _command_lines(text: str) -> list[str]:
    """Every ``dlsched ...`` command line a page shows.

    In a block that holds ``$ `` prompts only the prompted lines are commands (the rest is output);
    in other blocks every line that starts with ``dlsched``. Inline code that starts with ``dlsched `` too.
    """
    found: list[str] = []
    blocks, prose = _split(text)
    for block in blocks:
        lines = _joined(block)
        prompted = any(line.lstrip().startswith("$ ") for line in lines)
        for line in lines:
            stripped = line.strip()
            if prompted:
                if not stripped.startswith("$ "):
                    continue
                stripped = stripped[2:].strip()
            if stripped.startswith("dlsched ") or stripped == "dlsched":
                found.append(" ".join(stripped.split()))
    for line in prose:
        for span in INLINE.findall(line):
            if span.startswith("dlsched "):
                found.append(" ".join(span.split()))
    return found


def _options(command: click.Command, ctx: click.Context) -> set[str]:
    names: set[str] = set()
    for param in command.get_params(ctx):
        if isinstance(param, click.Option):
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


def _check(line: str) -> list[str]:
    """What is wrong with one command line: an unknown command or options that command lacks."""
    # One command per line: a shell comment, `;` or `&&` ends it.
    line = re.split(r"\s#|;|&&", line)[0]
    words = line.split()
    ctx = click.Context(cli, info_name="dlsched")
    rest = words[1:]
    if not rest or rest[0].startswith("-"):
        known = _options(cli, ctx)
        return [f"dlsched has no option {o}" for o in OPTION.findall(" ".join(rest)) if o not in known]
    name = rest[0]
    command = cli.get_command(ctx, name)
    if command is None:
        return [f"no command {name!r}"]
    sub = click.Context(command, info_name=name, parent=ctx)
    known = _options(command, sub)
    return [f"dlsched {name} has no option {o}" for o in OPTION.findall(" ".join(rest[1:])) if o not in known]


def _all_command_lines() -> list[tuple[str, str]]:
    return [(str(p.relative_to(REPO)), line) for p in _pages() for line in _command_lines(p.read_text())]


def test_the_docs_show_command_lines():
    lines = _all_command_lines()
    assert len(lines) > 40, lines
    assert {line.split()[1] for _, line in lines if len(line.split()) > 1} >= set(cli.list_commands(None))


def test_every_command_line_names_a_real_command_and_real_options():
    problems = [f"{page}: {line}\n    {p}" for page, line in _all_command_lines() for p in _check(line)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("line, expected", [
    ("dlsched bounds MODEL --oracle O", []),
    ("dlsched bounds MODEL --oracel O", ["dlsched bounds has no option --oracel"]),
    ("dlsched inspekt MODEL", ["no command 'inspekt'"]),
    ("dlsched order MODEL --algo tac -o p.json  # a comment --nothing", []),
    ("dlsched replay-batch --policy bsp|lbbsp-cpu[:ema]|lbbsp-gpu", []),
    ("dlsched --version", []),
])
def test_the_checker_itself(line, expected):
    assert _check(line) == expected


def test_console_blocks_and_continuations_are_read():
    text = "```console\n$ dlsched order M \\\n    --algo tac\ndlsched check: output, not a command\n```\n"
    assert _command_lines(text) == ["dlsched order M --algo tac"]


def test_readme_fits():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines, at most {MAX_README_LINES}"
    # The two set-up commands come first.
    head = "\n".join(lines[:8])
    assert "make demo" in head and "make test" in head


def _nav_pages(nav) -> list[str]:
    out: list[str] = []
    for item in nav:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for value in item.values():
                out.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return out


def test_mkdocs_nav_matches_the_pages():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["theme"]["name"] == "material"
    assert Path(config.get("docs_dir", "docs")).resolve() == DOCS.resolve() or config.get("docs_dir") == "docs"
    nav = _nav_pages(config["nav"])
    assert len(nav) == len(set(nav)), "a page is in the nav twice"
    missing = [p for p in nav if not (DOCS / p).is_file()]
    assert not missing, f"nav names pages that do not exist: {missing}"
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    unlisted = sorted(pages - set(nav))
    assert not unlisted, f"pages missing from the nav: {unlisted}"


def test_relative_links_point_at_files():
    broken = []
    for page in _pages():
        _, prose = _split(page.read_text())
        for target in LINK.findall("\n".join(prose)):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#")[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, broken


def test_no_diary_sentences():
    found = []
    for page in _pages():
        _, prose = _split(page.read_text())
        for n, line in enumerate(prose):
            low = line.lower()
            found += [f"{page.relative_to(REPO)}: {phrase!r} in {line.strip()!r}" for phrase in DIARY if phrase in low]
    assert not found, "\n".join(found)


def test_module_map_matches_the_tree():
    """docs/architecture.md lists every module of dlsched/ at its path, and only modules that exist."""
    text = (DOCS / "architecture.md").read_text()
    listed = set(re.findall(r"^\| `(dlsched/[\w/]+\.py)` \|", text, flags=re.M))
    tree = {str(p.relative_to(REPO)) for p in (REPO / "dlsched").rglob("*.py")
            if p.name != "__init__.py" or p.parent == REPO / "dlsched"}
    assert not sorted(tree - listed), f"modules missing from the module map: {sorted(tree - listed)}"
    assert not sorted(listed - tree), f"the module map lists paths that do not exist: {sorted(listed - tree)}"
