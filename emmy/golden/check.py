"""`emmy golden check`: are the golden files still true of the pipeline?

    problems = check_dir(Path("golden"))      # [] when every file and entry is fine

For every file under `golden/<target>/`: its layout (`emmy.golden.schema`), its target (the folder,
the file and each entry's key name the same one), and for every entry:

- duplicates: no key appears twice (in one file or across files of the folder);
- measurements: no entry comes from the cost measurer (its times measure nothing);
- staleness: compiling the listed model (and layer) at the listed token count for the target
  still gives a kernel of that name with that key; a changed body, shape or space version
  gives another key, and the entry no longer describes anything the pipeline produces;
- legality: the entry's knob values, and each alternative's, are legal for that kernel on the
  target (`emmy.tuning.legality.check`: the domains and every limit).

Each problem names the file and the entry. Compiling is the slow part: entries of one model,
layer and token count share one compile.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from emmy.diagnostics import EmmyError
from emmy.golden.schema import GoldenFile, golden_paths, read_file
from emmy.search.cost import CARD as COST_CARD


@dataclass(frozen=True)
class Finding:
    """One problem: where (file and entry) and what."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


def golden_files(directory: Path) -> tuple[list[GoldenFile], list[Finding]]:
    """The readable golden files under `directory/<target>/`, and a finding per unreadable one."""
    if not directory.is_dir():
        raise EmmyError(f"{directory}: no such golden folder")
    files, findings = [], []
    for path in golden_paths(directory):
        try:
            files.append(read_file(path))
        except EmmyError as e:
            findings.append(Finding("", str(e.args[0]).split("\n", 1)[0]))  # names the file itself
    return files, findings


def check_dir(directory: Path, compile_tasks=None) -> list[Finding]:
    """Every problem of the golden files under `directory` (see the module docstring).

    `compile_tasks(model, layer, tokens, target) -> {kernel name: TuneTask}` compiles a listed
    model; the default runs the pipeline (`emmy.search.task.tasks_of`)."""
    files, findings = golden_files(directory)
    compile_tasks = compile_tasks or model_tasks(directory.resolve().parent)
    seen: dict[str, str] = {}
    groups: dict[tuple, list[tuple[GoldenFile, int]]] = defaultdict(list)
    for f in files:
        if f.path.parent.name != f.target:
            findings.append(Finding(str(f.path), f"its target is {f.target} but it lies in the folder for {f.path.parent.name}"))
        for i, e in enumerate(f.entries):
            where = f.where(i)
            if e.target != f.target:
                findings.append(Finding(where, f"the key {e.key} is for {e.target or 'no target'}, the file is for {f.target}"))
                continue
            if e.key in seen:
                findings.append(Finding(where, f"duplicate: {seen[e.key]} has the same key {e.key}"))
                continue
            seen[e.key] = where
            if e.card == COST_CARD:
                findings.append(Finding(where, "not a measurement: written by the cost measurer (emmy tune --measurer cost)"))
                continue
            groups[(e.model, e.layer, e.tokens, f.target)].append((f, i))
    for (model, layer, tokens, target), members in groups.items():
        try:
            tasks = compile_tasks(model, layer, tokens, target)
        except EmmyError as e:
            for f, i in members:
                findings.append(Finding(f.where(i), f"stale: {model} at {tokens} tokens no longer compiles: {e}"))
            continue
        for f, i in members:
            findings.extend(_check_entry(f, i, tasks))
    return findings


def _check_entry(f: GoldenFile, i: int, tasks: dict) -> list[Finding]:
    from emmy.tuning.legality import check

    e, where = f.entries[i], f.where(i)
    task = tasks.get(e.kernel)
    if task is None:
        names = ", ".join(sorted(tasks)) or "none"
        return [Finding(where, f"stale: the pipeline makes no kernel '{e.kernel}' for {e.model} at {e.tokens} tokens (kernels: {names})")]
    if task.key.id != e.key:
        return [Finding(where, f"stale: the key is now {task.key.id}, the entry has {e.key} (the kernel's body, shapes or space version changed)")]
    info, target = task.info(), task.target_object()
    out = []
    for label, values in [("values", e.values), *((f"alternative {j}", a.values) for j, a in enumerate(e.alternatives))]:
        missing = [k for k in task.space if k not in values]
        extra = [k for k in values if k not in task.space]
        if missing or extra:
            detail = "; ".join(x for x in (
                f"missing {', '.join(missing)}" if missing else "",
                f"unknown {', '.join(extra)}" if extra else "") if x)
            out.append(Finding(where, f"{label}: not the kernel's knobs ({detail})"))
            continue
        reasons = check(info, values, target)
        if reasons:
            out.append(Finding(where, f"{label}: illegal on {target.name}: " + "; ".join(reasons)))
    return out


def model_tasks(root: Path):
    """Compile a listed model to its tuning tasks, by kernel name (factories relative to `root`)."""

    def compile_tasks(model: str, layer: int | None, tokens: int, target: str) -> dict:
        from emmy.driver import CompileOptions
        from emmy.search.task import tasks_of

        path, sep, fn = model.partition(":")
        if sep and path.endswith(".py") and not Path(path).is_absolute() and (root / path).exists():
            model = f"{root / path}:{fn}"
        tasks = tasks_of(CompileOptions(model=model, layer=layer, target=target), [tokens])
        return {t.kernel: t for t in tasks}

    return compile_tasks


__all__ = ["Finding", "check_dir", "golden_files", "model_tasks"]
