"""The user docs stay true: every `emmy` / `emmy-opt` command line in a code block of docs/*.md
runs and exits 0, and docs/README.md and the pages link only to pages that exist.

A command line is a line of a fenced code block that starts with `emmy `, `emmy-opt ` or
`EMMY_DUMP_DIR=DIR emmy `. It runs under bash (`-o pipefail`, so `emmy-opt ... | cmp - FILE`
checks both sides), with the venv's scripts first on PATH and every `/tmp/` path moved into a
temporary directory shared by all pages (so a dump written on one page can be replayed on the
next). Lines of one page run in order. A trailing `# exits N` means the line must exit N (and
print an `error:` line); a trailing `# needs a GPU`, or `emmy run` without
`--backend interpret`, marks a line that is skipped without a CUDA device. An identical command
line that already ran in this session is not run again. A line with `--explain` must also print
at least one decision row (the table the page shows). A ```text block right after a ```sh block
with one command line is that command's output, and must match what it prints (lines `...` stand
for lines left out).
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
PAGES = sorted(DOCS.glob("[0-9][0-9]-*.md"))

_COMMAND = re.compile(r"^(?:EMMY_DUMP_DIR=\S+\s+)?emmy(?:-opt)?(?:\s|$)")
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
def runner(tmp_path_factory):
    """Runs doc command lines in one shared temporary /tmp; remembers what already ran."""
    tmp = tmp_path_factory.mktemp("docs-tmp")
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


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
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


def shown_outputs(path: Path) -> list[tuple[Command, int, list[str]]]:
    """(command, line, expected lines) for every ```text block that directly follows a ```sh
    block holding exactly one command: the page shows that command's output."""
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
    by_line = {c.line: c for c in commands(path)}
    out = []
    for (lang_a, start_a, lines_a), (lang_b, start_b, lines_b) in zip(blocks, blocks[1:]):
        if lang_a != "sh" or lang_b != "text":
            continue
        cmds = [by_line[start_a + 1 + i] for i in range(len(lines_a)) if start_a + 1 + i in by_line]
        if len(cmds) == 1:
            out.append((cmds[0], start_b, lines_b))
    return out


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_page_outputs_match(page, runner):
    """What a page shows as a command's output is what the command prints: every shown line
    appears in the output, in order (a line `...` stands for lines left out)."""
    gpu = _has_gpu()
    for cmd in commands(page):  # in page order: later commands read earlier dumps
        if not cmd.gpu or gpu:
            runner(cmd)
    failures = []
    for cmd, line, shown in shown_outputs(page):
        if cmd.gpu and not gpu:
            continue
        proc = runner(cmd)
        printed = [l.rstrip() for l in (proc.stdout + proc.stderr).splitlines()]
        i = 0
        for want in shown:
            if want.strip() in ("...", "…"):
                continue
            while i < len(printed) and printed[i] != want:
                i += 1
            if i == len(printed):
                failures.append(f"{page.name}:{line}: output of `{cmd.text}` has no line (in order)\n  {want}")
                break
            i += 1
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


@pytest.mark.parametrize("page", [*PAGES, DOCS / "README.md"], ids=[*(p.stem for p in PAGES), "README"])
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
