"""Measurements for the prior: the tuning store's trials as (kernel, knob values, time) samples.

    data = records_data(store_url=None, files=["records.json"])  # the store, or export files
    samples, skipped = samples_of(data, target="sm_90a")

Each study of a store (or of an export written by `emmy records export`, read through
`emmy.records`) is one kernel key; each of its trials with status `ok` is one sample. A key is a
digest and cannot give back the kernel, so the study keeps the isolated tile-stage module it was
tuned from (study attribute `emmy.module`, written by `emmy.search.study.open_study`); the
kernel is classified from it and every trial's features are computed again with the current plan
(so refitting after the model changes needs no new measurement), its values read in today's
space (a knob taken out of it as a no-op is left out). For studies tuned before the store kept
modules, `modules_of(options, tokens)` rebuilds them by compiling the model the key
came from (its keys must match: same pipeline, same shapes). A study without a module, of
another target, of an older space version, or whose module no longer parses or classifies is
skipped with a reason (`skipped`: one line per study), never silently.

The groups `evaluate` holds out: `key` (the shape: one tuning problem) and `model`: the study
attribute `emmy.model` where the tuner recorded one, else the key's structure (the kernel on
every shape at once); `emmy.prior.evaluate.model_groups` joins a structure left unrecorded to
the model other studies of it recorded, so a model is held out with all its kernels' keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from emmy.diagnostics import EmmyError, first_line
from emmy.records.store import KERNEL_ATTR, MODEL_ATTR, MODULE_ATTR
from emmy.schedule.key import key_id_part


@dataclass(frozen=True)
class Sample:
    key: str  # the kernel key id
    structure: str  # the key's structure id
    model: str  # the group "leave one model out" holds out
    kind: str
    kernel: str
    values: Mapping[str, object]
    time_s: float
    features: Mapping[str, float]  # emmy.prior.features with the target's bandwidths


@dataclass
class KeyData:
    """One key's kernel (for ranking its candidates again) and its samples."""

    key: str
    kind: str
    kernel: object  # emmy.prior.features.Kernel
    space: Mapping[str, tuple]
    samples: list[Sample] = field(default_factory=list)
    ir: object = None  # the parsed module (the KernelInfo points into it)
    date: str = ""  # the latest date of its measured trials (ISO 8601, UTC)

    @property
    def problem(self) -> tuple[str, str]:
        """The tuning problem the key names across pipeline versions: its kernel and its shape
        (the key's second part). A newer pipeline gives the same kernel on the same shape a
        new structure, so a new key; both studies measured the same problem."""
        return (self.samples[0].kernel if self.samples else "", key_id_part(self.key, "shape") or self.key)


def records_data(store_url: str | None = None, files: Sequence[str] = ()) -> list[tuple[str, dict]]:
    """(source name, export data) from the store at `store_url` and/or export files; an
    EmmyError for a missing store or file, or one that is not an export."""
    from emmy.records.transfer import read_export, read_file

    out = []
    if store_url:
        from emmy.records.store import display_url, open_store, store_errors
        from emmy.records.transfer import export_records

        store = open_store(store_url, create=False)
        if store is None:
            raise EmmyError(f"there is no store at {display_url(store_url)} (nothing has been tuned)")
        with store_errors(store.name):
            out.append((store.name, export_records(store)))
    for name in files:
        path = Path(name)
        out.append((str(path), read_export(read_file(path), str(path))))
    return out


def samples_of(data: Sequence[tuple[str, Mapping]], target: str,
               modules: Mapping[str, str] | None = None) -> tuple[dict[str, KeyData], list[str]]:
    """The samples of `target` in `data` grouped by key, and one line per study skipped.
    `modules` (key id -> isolated module text, `modules_of`) stands in for the module of a
    study that does not keep one."""
    from emmy.records.store import KEY_ATTR
    from emmy.schedule.key import SPACE_VERSION
    from emmy.search.cost import CARD as COST_CARD
    from emmy.targets import get_target

    tgt = get_target(target)
    keys: dict[str, KeyData] = {}
    skipped: list[str] = []
    for source, export in data:
        for study in export["studies"]:
            name, attrs = study["name"], study["attrs"]
            key = attrs.get(KEY_ATTR) or {}
            if not isinstance(key, Mapping) or key.get("target") != target:
                continue
            where = f"{source}: study {name[:12]}"
            if key.get("version") != SPACE_VERSION:
                skipped.append(f"{where}: space version {key.get('version')} (this Emmy's is {SPACE_VERSION})")
                continue
            module = attrs.get(MODULE_ATTR)
            if not isinstance(module, str):
                module = (modules or {}).get(name)
            if not isinstance(module, str):
                skipped.append(f"{where} ({attrs.get(KERNEL_ATTR, '?')}): no {MODULE_ATTR} attribute "
                               f"(tuned before the store kept the kernel); name the model and token counts "
                               f"it was tuned at (--model, --tokens) to rebuild it, or tune it again")
                continue
            kd = keys.get(name)
            if kd is None:
                try:
                    kd = keys[name] = _key_data(name, module, tgt, where)
                except EmmyError as e:
                    skipped.append(f"{where}: {first_line(e)}")
                    continue
            model = str(attrs.get(MODEL_ATTR) or key.get("structure_id") or name)
            n = stale = unmeasured = 0
            for t in study["trials"]:
                env = (t.get("user_attrs") or {}).get("env") or {}
                if isinstance(env, Mapping) and env.get("card") == COST_CARD:
                    unmeasured += 1  # the cost measurer's ranking, not a measurement
                    continue
                try:
                    s = _sample(t, kd, name, str(key.get("structure_id", name)), model, str(attrs.get(KERNEL_ATTR, "")))
                except EmmyError:
                    stale += 1  # values the current plan no longer builds
                    continue
                if s is not None:
                    kd.samples.append(s)
                    kd.date = max(kd.date, str((t.get("user_attrs") or {}).get("date") or ""))
                    n += 1
            if stale:
                skipped.append(f"{where}: {stale} trials whose values the current plan no longer builds")
            if unmeasured:
                skipped.append(f"{where}: {unmeasured} trials written by the cost measurer (not measurements)")
            if not n:
                skipped.append(f"{where}: no trial measured ok")
    return {k: v for k, v in keys.items() if v.samples}, skipped


def modules_of(options, tokens: Sequence[int]) -> dict[str, str]:
    """Key id -> isolated tile-stage module of every kernel of the model compiled with `options`
    (`emmy.driver.CompileOptions`) at each token count: what `emmy tune` would have kept."""
    from emmy.search.task import tasks_of

    return {t.key_id: t.module for t in tasks_of(options, tokens)}


def _key_data(name: str, module: str, target, where: str) -> KeyData:
    from emmy.analysis.classify import classify
    from emmy.context import make_context
    from emmy.dialects.tile import KernelOp
    from emmy.ir_io import parse_module
    from emmy.prior.features import Kernel
    from emmy.tuning.knobs import knob_space_for

    try:
        parsed = parse_module(make_context(), module, f"<{where}>")
        op = next(op for op in parsed.walk() if isinstance(op, KernelOp))
        info = classify(op)
        kernel = Kernel(info, target)
        space = knob_space_for(info, target)
    except EmmyError:
        raise
    except StopIteration:
        raise EmmyError("its module holds no tile.kernel") from None
    except Exception as e:  # a module of an older Emmy that the parser no longer reads
        raise EmmyError(f"its module no longer compiles ({type(e).__name__}: {first_line(e)})") from None
    return KeyData(name, info.kind, kernel, space, ir=parsed)


def _sample(trial: Mapping, kd: KeyData, key: str, structure: str, model: str, kernel: str) -> Sample | None:
    from emmy.prior.model import with_target

    attrs = trial.get("user_attrs") or {}
    if attrs.get("status") != "ok" or trial.get("state") != "COMPLETE":
        return None
    time_s, values = attrs.get("time_s"), attrs.get("values")
    if not isinstance(time_s, (int, float)) or not time_s > 0 or not isinstance(values, dict):
        return None
    # a knob the kernel's space no longer has (a no-op taken out of it) changes nothing its plan
    # builds: the trial measured the program of its other values
    values = {k: v for k, v in values.items() if k in kd.space}
    f = kd.kernel.features(values, attrs.get("facts") or {})  # EmmyError: the plan no longer builds them
    return Sample(key, structure, model, kd.kind, kernel, dict(values), float(time_s), with_target(f, kd.kernel.target))


__all__ = ["KeyData", "MODEL_ATTR", "MODULE_ATTR", "Sample", "modules_of", "records_data", "samples_of"]
