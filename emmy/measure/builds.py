"""Building candidates ahead of the GPU: lowering and nvcc in a pool of processes.

    with Builder(arch="sm_90a", cache_dir=home, workers=16, timeout=120) as builder:
        futures = builder.submit_all([BuildJob(text, "o_proj_residual", {"block_m": 128}), ...])
        built = builder.result(futures[0])      # a Built: status, reason, facts, plan, cubin

Each job runs in a worker process: the isolated module through the pipeline from decide-forks on
with the candidate pinned (`candidate.py`; the lowering is kept in the kernel cache too,
`lower_cached`, so re-measuring a study's top candidates lowers nothing again), then nvcc with
ptxas's report (`-Xptxas -v`), into the kernel cache that `emmy run` uses
(`emmy.backend.run.cubin_path`; the report is kept beside the cubin, so a candidate built once
is never built again). A build never raises and never loses
a worker: a candidate the pipeline rejects or nvcc fails on is status `build_failed` with the
message, one past the time limit is `build_timeout` (nvcc and its compilers are stopped), one
whose kernels spill more than `spill_limit` bytes (stores plus loads, ptxas) is `spills`, and
when a worker process dies the pool is started afresh and the builds it held are submitted again
(once: a build that kills its worker twice is `build_failed`).

Workers are started with `spawn` (a forked copy of a process holding a CUDA context is unsafe), on
demand by the thread that submits, and are killed when the process that started
them dies (`emmy.measure.child.die_with_parent`: a measuring child killed past its deadline leaves
no build worker behind); use a Builder from a thread that lives as long as it.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import traceback
from collections.abc import Mapping, Sequence
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path

from emmy.diagnostics import EmmyError

DEFAULT_SPILL_LIMIT = 128  # bytes of spill stores plus loads per kernel before a build is "spills"
DEFAULT_TIMEOUT = 180.0  # seconds of nvcc per candidate


@dataclass(frozen=True)
class BuildJob:
    """One candidate to build: an isolated module's text, its kernel and the values to pin."""

    module_text: str
    kernel_name: str
    values: Mapping[str, object]


@dataclass(frozen=True)
class Built:
    """A build's outcome. `status` is "ok", "build_failed", "build_timeout" or "spills"; `plan`
    (an `emmy.backend.plan.LaunchPlan`) and `cubin` (its path in the kernel cache) are set when
    the build produced a cubin (also for "spills")."""

    status: str
    reason: str = ""
    facts: Mapping[str, object] = field(default_factory=dict)
    plan: object = None
    cubin: str | None = None


def build_source(source: str, arch: str, cache_dir: Path, timeout: float = DEFAULT_TIMEOUT,
                 spill_limit: int = DEFAULT_SPILL_LIMIT) -> Built:
    """nvcc one `.cu` text into the kernel cache (or find it there), with ptxas's report as facts:
    per kernel registers, static shared memory, stack and spill bytes."""
    from emmy.backend.nvcc import BuildTimeout, compile_with_report
    from emmy.backend.run import cubin_path, keep_build, private_name, store_atomically

    cubin = cubin_path(source, arch, cache_dir)
    report_file = cubin.with_name(cubin.stem + ".ptxas.json")
    try:
        if cubin.exists() and report_file.exists():
            report = json.loads(report_file.read_text())
        else:
            cubin.parent.mkdir(parents=True, exist_ok=True)
            built, infos = compile_with_report(source, arch, cubin.parent / cubin.stem, name=private_name(),
                                               timeout=timeout)
            report = {name: asdict(info) for name, info in infos.items()}
            store_atomically(report_file, json.dumps(report).encode())
            store_atomically(cubin, built.read_bytes())
            keep_build(built)
    except BuildTimeout as e:
        return Built("build_timeout", str(e))
    except EmmyError as e:
        return Built("build_failed", str(e))
    except OSError as e:
        return Built("build_failed", f"kernel cache {cubin.parent}: {e}")
    facts = {"ptxas": report, **spill_facts(report)}
    worst = max(report.values(), key=lambda r: r["spill_stores"] + r["spill_loads"], default=None)
    if worst is not None and worst["spill_stores"] + worst["spill_loads"] > spill_limit:
        spilled = worst["spill_stores"] + worst["spill_loads"]
        return Built("spills", f"kernel {worst['kernel']} spills {worst['spill_stores']} bytes to local memory and "
                     f"loads {worst['spill_loads']} back ({spilled} > the limit of {spill_limit})",
                     facts, cubin=str(cubin))
    return Built("ok", "", facts, cubin=str(cubin))


def spill_facts(report: Mapping[str, Mapping[str, object]]) -> dict[str, int]:
    """The largest registers count and the total spill bytes over a ptxas report's kernels."""
    return {
        "registers": max((int(r["registers"]) for r in report.values()), default=0),
        "spill_bytes": sum(int(r["spill_stores"]) + int(r["spill_loads"]) for r in report.values()),
        "wgmma_serialized": any(bool(r.get("wgmma_serialized")) for r in report.values()),
    }


def lowered_path(job: BuildJob, cache_dir: Path) -> Path:
    """Where a candidate's lowering is kept: named by a hash of Emmy's source, the isolated
    module, the kernel and the values (any change to the compiler lowers it afresh)."""
    from emmy.measure.gpu import source_hash

    text = "\0".join([source_hash(), job.module_text, job.kernel_name, repr(sorted(job.values.items()))])
    return Path(cache_dir) / "lowered" / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.pickle"


def lower_cached(job: BuildJob, cache_dir: Path):
    """The candidate lowered (`candidate.lower_candidate`), read from the kernel cache where an
    earlier build (another worker's, the naming's) kept it; an unreadable entry is lowered again.
    A candidate the pipeline rejects raises its EmmyError (not kept)."""
    from emmy.backend.run import store_atomically
    from emmy.measure.candidate import lower_candidate

    path = lowered_path(job, cache_dir)
    try:
        return pickle.loads(path.read_bytes())
    except Exception:  # noqa: BLE001  (missing, half-written by a killed process, from another Emmy)
        pass
    lowered = lower_candidate(job.module_text, job.kernel_name, job.values)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        store_atomically(path, pickle.dumps(lowered))
    except OSError:
        pass  # (a read-only cache: lowered each time)
    return lowered


def build_candidate(job: BuildJob, arch: str, cache_dir: str, timeout: float, spill_limit: int) -> Built:
    """Lower (or find the lowering in the cache) and build one candidate (runs in a worker
    process); never raises."""
    try:
        lowered = lower_cached(job, Path(cache_dir))
    except EmmyError as e:
        return Built("build_failed", f"the pipeline rejects the candidate: {e}")
    except Exception as e:  # a bug in a pass: reported with where it happened, the worker lives on
        where = traceback.format_exc(limit=-3).strip().splitlines()
        return Built("build_failed", f"the pipeline failed: {type(e).__name__}: {e} ({' / '.join(where[-4:])})")
    built = build_source(lowered.plan.source, arch, Path(cache_dir), timeout, spill_limit)
    facts = {**lowered.facts, **built.facts}
    return Built(built.status, built.reason, facts, lowered.plan, built.cubin)


class Builder:
    """A pool of worker processes building candidates for one architecture and kernel cache."""

    def __init__(self, arch: str, cache_dir: Path, workers: int = 2, timeout: float = DEFAULT_TIMEOUT,
                 spill_limit: int = DEFAULT_SPILL_LIMIT):
        if workers < 1:
            raise EmmyError(f"builds: at least one worker process is needed (got {workers})")
        self.arch, self.cache_dir, self.workers = arch, Path(cache_dir), workers
        self.timeout, self.spill_limit = timeout, spill_limit
        self._pool: ProcessPoolExecutor | None = None
        # what each pending future builds, and in which pool (to submit it again if that dies)
        self._jobs: dict[Future, tuple[BuildJob, ProcessPoolExecutor]] = {}

    def __enter__(self) -> "Builder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _executor(self) -> ProcessPoolExecutor:
        from emmy.measure.child import die_with_parent

        if self._pool is None:  # (its workers die with this process: a killed measuring child leaks none)
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=get_context("spawn"),
                                             initializer=die_with_parent)
        return self._pool

    def submit(self, job: BuildJob) -> Future:
        args = (job, self.arch, str(self.cache_dir), self.timeout, self.spill_limit)
        try:
            future = self._executor().submit(build_candidate, *args)
        except BrokenProcessPool:  # a worker died earlier: start a fresh pool
            self._restart()
            future = self._executor().submit(build_candidate, *args)
        self._jobs[future] = (job, self._executor())
        return future

    def submit_all(self, jobs: Sequence[BuildJob]) -> list[Future]:
        return [self.submit(job) for job in jobs]

    def result(self, future: Future, retry: bool = True) -> Built:
        """A submitted build's outcome. When a worker process dies, every build pending in the
        pool is lost with it: the pool is started afresh and this build submitted again, once
        (a build that kills its worker twice is a failed build). A worker that gives no answer
        within the time limit plus a margin for the lowering gives a timed-out build."""
        job, pool = self._jobs.pop(future, (None, None))
        try:
            return future.result(timeout=self.timeout + 120.0)
        except (BrokenProcessPool, CancelledError) as e:  # its pool died, or was stopped
            if pool is self._pool:  # the pool in use (not one replaced already)
                self._restart()
            if not retry or job is None:
                return Built("build_failed", f"the build worker process died: {e or type(e).__name__}")
            return self.result(self.submit(job), retry=False)
        except TimeoutError:
            self._restart()
            return Built("build_timeout", f"the build worker gave no answer within {self.timeout + 120.0:g} s")

    def _restart(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


__all__ = ["DEFAULT_SPILL_LIMIT", "DEFAULT_TIMEOUT", "BuildJob", "Built", "Builder", "build_candidate",
           "build_source", "lower_cached", "lowered_path", "spill_facts"]
