"""The user docs stay true: every `emmy` / `emmy-opt` command line in a code block of docs/*.md
runs and exits 0, what a page shows as a command's output is what the command prints, docs/README.md
and the pages link only to pages that exist, and the README's commands work in a fresh shell.

A command line is a line of a fenced code block that starts with `emmy `, `emmy-opt `,
`EMMY_DUMP_DIR=DIR emmy ` or `ls ` (to list a dump directory). It runs under bash (`-o pipefail`, so `emmy-opt ... | cmp - FILE`
checks both sides), with the venv's scripts first on PATH and every `/tmp/` path moved into a
temporary directory shared by all pages (so a dump written on one page can be replayed on the
next). Lines of one page run in order. A trailing `# exits N` means the line must exit N (and
print an `error:` line); a trailing `# needs a GPU`, or `emmy run` without
`--backend interpret`, marks a line that is skipped without a CUDA device. An identical command
line that already ran in this session is not run again. A line with `--explain` must also print
at least one decision row (the table the page shows).

A page shows a command's output by a fenced block (```text, ```mlir, ...) right after the ```sh
block of its commands, with nothing but blank lines between: the output of the whole ```sh block,
its commands' stdout then stderr, one command after the other. The shown lines must be the printed
lines exactly (leading and trailing blanks aside), except that a line `...` stands for any number
of lines left out; without a `...` first or last, the output must start or end with the shown
lines. An ```sh block followed by an output block must hold only command lines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("[0-9][0-9]-*.md"))  # the numbered series
# every page whose commands run: the series and the reference pages
RUN_PAGES = sorted(p for p in DOCS.glob("*.md") if p.name != "README.md")

_COMMAND = re.compile(r"^(?:(?:EMMY_DUMP_DIR=\S+\s+)?emmy(?:-opt)?|ls)(?:\s|$)")
_EXITS = re.compile(r"#\s*exits\s+(\d+)\s*$")
_TMP = re.compile(r"(?<![\w./-])/tmp/")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# a row of the `--explain` table: kernel, knob, value, tier, reason
_DECISION_ROW = re.compile(r"^\S+\s+\S+\s+\S+\s+(pinned|rule|local|golden|nearest|prior)\s", re.M)


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str
    exit_code: int
    gpu: bool


def code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line inside a fenced code block."""
    out, fence = [], None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if fence is None:
            if stripped.startswith("```"):
                fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
        elif stripped.startswith(fence) and stripped.strip("`") == "":
            fence = None
        else:
            out.append((n, stripped))
    assert fence is None, f"{path.name}: unclosed code block"
    return out


def commands(path: Path) -> list[Command]:
    out = []
    for n, text in code_lines(path):
        if not _COMMAND.match(text):
            continue
        m = _EXITS.search(text)
        gpu = "# needs a GPU" in text or (
            re.search(r"\bemmy run\b", text) is not None and "--backend interpret" not in text
        )
        out.append(Command(path.name, n, text, int(m.group(1)) if m else 0, gpu))
    return out


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


@pytest.fixture(scope="session")
def tmp_dir(tmp_path_factory) -> Path:
    """What `/tmp/` in a doc command line stands for."""
    return tmp_path_factory.mktemp("docs-tmp")


@pytest.fixture(scope="session")
def runner(tmp_dir):
    """Runs doc command lines in one shared temporary /tmp; remembers what already ran."""
    tmp = tmp_dir
    env = dict(os.environ)
    env.pop("EMMY_DUMP_DIR", None)
    env["EMMY_HOME"] = str(tmp / "emmy-home")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done: dict[str, subprocess.CompletedProcess] = {}

    def run(cmd: Command) -> subprocess.CompletedProcess:
        text = _TMP.sub(str(tmp) + "/", cmd.text)
        if text not in done:
            done[text] = subprocess.run(
                ["bash", "-o", "pipefail", "-c", text], capture_output=True, text=True,
                env=env, cwd=tmp, timeout=300,
            )
        return done[text]

    return run


def test_every_page_has_commands():
    assert PAGES, "no numbered pages under docs/"
    for page in PAGES:
        assert commands(page), f"{page.name}: no emmy command found in its code blocks"


@pytest.mark.parametrize("page", RUN_PAGES, ids=[p.stem for p in RUN_PAGES])
def test_page_commands_run(page, runner):
    gpu = _has_gpu()
    failures = []
    for cmd in commands(page):
        if cmd.gpu and not gpu:
            continue  # needs a CUDA device
        proc = runner(cmd)
        why = None
        if proc.returncode != cmd.exit_code or "Traceback" in proc.stderr:
            why = f"exit {proc.returncode} (want {cmd.exit_code})"
        elif cmd.exit_code != 0 and "error:" not in proc.stderr:
            why = "no 'error:' message"
        elif "--explain" in cmd.text and not _DECISION_ROW.search(proc.stdout):
            why = "--explain printed no decision"
        if why:
            failures.append(f"{cmd.page}:{cmd.line}: {cmd.text}\n  {why}\n  stderr: {proc.stderr.strip()[-2000:]}")
    assert not failures, "\n".join(failures)


@dataclass(frozen=True)
class Shown:
    """An output block: the commands of the ```sh block before it and the lines it shows."""

    line: int
    commands: list[Command]
    others: list[str]  # lines of the ```sh block that are not commands
    lines: list[str]


def fenced_blocks(path: Path) -> list[tuple[str, int, list[str]]]:
    """(language, line of the opening fence, lines) of every fenced block, and ("prose", line,
    []) for every non-blank line between blocks."""
    blocks, cur = [], None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if cur is None:
            if stripped.startswith("```"):
                cur = (stripped.strip("`").strip(), n, [])
            elif stripped:
                blocks.append(("prose", n, []))
        elif stripped.startswith("```") and stripped.strip("`") == "":
            blocks.append(cur)
            cur = None
        else:
            cur[2].append(raw.rstrip())
    return blocks


def shown_outputs(path: Path) -> list[Shown]:
    """Every output block: a fenced block other than ```sh right after a ```sh block."""
    blocks = fenced_blocks(path)
    by_line = {c.line: c for c in commands(path)}
    out = []
    for (lang_a, start_a, lines_a), (lang_b, start_b, lines_b) in zip(blocks, blocks[1:]):
        if lang_a != "sh" or lang_b in ("sh", "prose"):
            continue
        numbered = [(start_a + 1 + i, text) for i, text in enumerate(lines_a) if text.strip()]
        cmds = [by_line[n] for n, _ in numbered if n in by_line]
        others = [text for n, text in numbered if n not in by_line]
        out.append(Shown(start_b, cmds, others, lines_b))
    return out


def match_shown(shown: list[str], printed: list[str]) -> str | None:
    """None when `printed` is what `shown` shows (see the module docstring), else what differs."""
    want = [l.strip() for l in shown]
    got = [l.strip() for l in printed]
    runs: list[list[str]] = [[]]
    for line in want:
        if line in ("...", "…"):
            runs.append([])
        else:
            runs[-1].append(line)
    open_start, open_end = not runs[0], not runs[-1]
    runs = [r for r in runs if r]
    at = 0
    for i, run in enumerate(runs):
        first, last = i == 0, i == len(runs) - 1
        if last and not open_end:
            candidates = [len(got) - len(run)] if len(got) - len(run) >= at else []
        elif first and not open_start:
            candidates = [0]
        else:
            candidates = range(at, len(got) - len(run) + 1)
        pos = next((c for c in candidates if got[c : c + len(run)] == run), None)
        if pos is None or (first and not open_start and pos != 0):
            where = "at the start" if first and not open_start else "at the end" if last and not open_end else "after the lines before"
            return f"these shown lines are not in the output {where}:\n    " + "\n    ".join(run)
        at = pos + len(run)
    if not runs and got and not (open_start or open_end):
        return "the page shows no output, the command prints some"
    return None


def test_match_shown_fails_when_the_page_lies():
    printed = ["a", "  b", "c", "d"]
    assert match_shown(["a", "b", "c", "d"], printed) is None
    assert match_shown(["a", "...", "d"], printed) is None
    assert match_shown(["...", "b", "c", "..."], printed) is None
    assert match_shown(["a", "c", "d"], printed)  # a line left out without `...`
    assert match_shown(["a", "b", "..."], ["x", *printed])  # not at the start
    assert match_shown(["...", "c"], printed)  # not at the end
    assert match_shown(["a", "...", "c", "b", "..."], printed)  # out of order
    assert match_shown(["a", "b", "c", "d", "e"], printed)  # a line it does not print


@pytest.mark.parametrize("page", RUN_PAGES, ids=[p.stem for p in RUN_PAGES])
def test_page_outputs_match(page, runner, tmp_dir):
    """What a page shows as a command's output is what its commands print."""
    gpu = _has_gpu()
    for cmd in commands(page):  # in page order: later commands read earlier dumps
        if not cmd.gpu or gpu:
            runner(cmd)
    failures = []
    for shown in shown_outputs(page):
        if shown.others or not shown.commands:
            failures.append(f"{page.name}:{shown.line}: an output block after a ```sh block with lines that are not "
                            f"emmy commands: {shown.others}")
            continue
        if any(c.gpu for c in shown.commands) and not gpu:
            continue
        printed = []
        for cmd in shown.commands:
            proc = runner(cmd)
            printed += (proc.stdout + proc.stderr).replace(str(tmp_dir) + "/", "/tmp/").splitlines()
        why = match_shown(shown.lines, printed)
        if why:
            text = "; ".join(c.text for c in shown.commands)
            head = "\n    ".join(printed[:40])
            failures.append(f"{page.name}:{shown.line}: the output of `{text}` is not what the page shows: {why}\n"
                            f"  it printed ({len(printed)} lines, the first 40):\n    {head}")
    assert not failures, "\n".join(failures)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    code = {n for n, _ in code_lines(path)}
    return {
        _slug(line.lstrip("#"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if line.startswith("#") and n not in code
    }


def test_index_lists_pages_that_exist():
    index = DOCS / "README.md"
    rows = [line for line in index.read_text().splitlines() if re.match(r"^\|\s*(\[)?\d\.", line)]
    assert len(rows) == 9, f"docs/README.md should list pages 1-9, found {len(rows)} rows"
    linked = set()
    for row in rows:
        link = _LINK.search(row)
        if "not written yet" in row:
            assert link is None, f"a page marked 'not written yet' has a link: {row}"
            continue
        assert link is not None, f"a page not marked 'not written yet' has no link: {row}"
        target = DOCS / link.group(1)
        assert target.is_file(), f"docs/README.md links to a missing page: {link.group(1)}"
        linked.add(target.name)
    for page in PAGES:
        assert page.name in linked, f"{page.name} exists but docs/README.md does not link to it"


@pytest.mark.parametrize("page", [*RUN_PAGES, DOCS / "README.md"], ids=[*(p.stem for p in RUN_PAGES), "README"])
def test_links_resolve(page):
    code = {n for n, _ in code_lines(page)}
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if n in code:
            continue
        for target in _LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue  # an external URL
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            assert path.exists(), f"{page.name}:{n}: link to a missing file {target}"
            if anchor and path.suffix == ".md":
                assert anchor in _anchors(path), f"{page.name}:{n}: no heading for #{anchor} in {path.name}"


# ------------------------------------------------------------------------------ the README
README = ROOT / "README.md"


def _readme_blocks() -> list[list[str]]:
    return [lines for lang, _, lines in fenced_blocks(README) if lang == "sh"]


def test_readme_test_command_is_what_ci_runs():
    """The README's test command is the last line of .ci/run, word for word."""
    (tests,) = [b for b in _readme_blocks() if any("pytest" in l for l in b)]
    ci = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if l.strip()]
    assert tests[-1] == ci[-1]
    # lit runs even when pytest fails, and the exit status says whether both passed
    assert "-x" not in tests[-1].split() and "&& .venv/bin/lit" not in tests[-1]


def test_readme_commands_work_in_a_fresh_shell():
    """Outside an activated venv, `emmy`, `emmy-opt`, `lit`, `python` and `pip` are the venv's
    only with `.venv/bin/` in front: a block that uses them bare activates the venv first."""
    bare = re.compile(r"(?:^|&&\s*|;\s*)(emmy|emmy-opt|lit|python|pip|pytest)\s")
    for block in _readme_blocks():
        active = False
        for line in block:
            if line.strip() == ". .venv/bin/activate":
                active = True
            m = bare.search(line.split("#")[0])
            assert active or m is None, f"README: `{m.group(1)}` is not on PATH in a fresh shell: {line}"


def test_readme_things_to_try_run(tmp_dir):
    """The README's "Try it" compile (its dump directory) and every line of "More things to try"
    run in a fresh shell from the repository root and exit 0."""
    (try_it,) = [b for b in _readme_blocks() if "EMMY_DUMP_DIR=" in b[0]]
    (more,) = [b for b in _readme_blocks() if b[0].strip() == ". .venv/bin/activate"]
    dump = [part for part in try_it[0].split(" && ") if part.startswith("EMMY_DUMP_DIR=")]
    env = {k: v for k, v in os.environ.items() if k != "EMMY_DUMP_DIR"}
    env["EMMY_HOME"] = str(tmp_dir / "emmy-home")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    failures = []
    for line in [*dump, *more[1:]]:
        text = _TMP.sub(str(tmp_dir) + "/", line.replace(".venv/bin/", ""))
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", text], capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=300)
        if proc.returncode != 0 or "Traceback" in proc.stderr:
            failures.append(f"README: {line}\n  exit {proc.returncode}: {proc.stderr.strip()[-1000:]}")
    assert not failures, "\n".join(failures)
