"""The GPU measurer: candidates of one kernel built ahead, checked, then timed one by one.

    measurer = GpuMeasurer(cache_dir=home)          # EMMY_HOME's kernel cache, shared with emmy run
    measurer.measure(task, [{"block_m": 128}, {"block_m": 64, "warps": 4}])   # -> [Measurement, ...]
    measurer.remeasure(task, [best, second, third], rounds=20)             # interleaved A B C A B C

For each task (`emmy.search.task.TuneTask`: kernel name, target, the isolated module's text):
fresh random inputs of the kernel's shapes (seeded) and the kernel's reference results on them,
computed once per host (`reference.py`: the loop-stage evaluator on the kernel's body, the
schedule playing no part; a large kernel on three runs of rows only, the rows of its activation
or its queries; kept in the kernel cache, so that the measuring processes of a host compute it
once and the others read it). For each candidate: its build (`builds.py`, in worker
processes, all submitted before the first is timed), the module loaded, the inputs bound with
outputs and temporaries filled with NaN (`emmy.backend.run.poisoned`), one call checked against
the reference (over `tolerance`, or a NaN left in an output, is status "wrong" with the error),
then timed (`timing.py`): the call captured in a CUDA graph over as many copies of its buffers as
`rotation_count` says, so that no call finds its data in L2, replayed for `warmup_s` seconds
untimed (the card's clock up), then `reps` times `inner` replays, each repetition one sample.

Measuring processes on one host take turns on a GPU (`gpu_lock`: a file lock per device in the
kernel cache's folder): one checks and times while the others build. A launch that fails is
status "launch_error". A CUDA error that poisons the context (an illegal
address) leaves the process unable to use the GPU: every later candidate of the same measurer is
then "launch_error" too, with the first error as its reason. `emmy tune` runs it in a child
process with a deadline (`child.py`: a kernel that never finishes is a "timeout", the child
replaced), told when the GPU is held for each candidate (`measure_each`'s `started`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from emmy.diagnostics import EmmyError
from emmy.measure import Measurement
from emmy.measure.builds import DEFAULT_SPILL_LIMIT, DEFAULT_TIMEOUT, Builder, BuildJob, Built
from emmy.measure.reference import TaskInputs, check_outputs, task_inputs
from emmy.measure.timing import l2_bytes, replayable, rotation_count, sample_replays, summarize, warm_up

DEFAULT_TOLERANCE = 1e-2


@dataclass
class _Loaded:
    """A candidate loaded and bound over copies of its buffers, ready to replay; once checked,
    its error and facts."""

    module: object  # emmy.backend.run.GpuModule
    bindings: list
    run: Callable[[], object]
    error: float = 0.0
    facts: Mapping[str, object] = field(default_factory=dict)


class GpuMeasurer:
    """Measures candidates on the current CUDA device (see the module docstring).

    `check_hook(index, outputs)`, for tests: called after a candidate's checked call with its
    output tensors, before they are compared (a test corrupts them to see "wrong" reported)."""

    def __init__(self, cache_dir: Path, *, workers: int | None = None, timeout: float = DEFAULT_TIMEOUT,
                 spill_limit: int = DEFAULT_SPILL_LIMIT, tolerance: float = DEFAULT_TOLERANCE, reps: int = 30,
                 inner: int = 3, warmup_s: float = 0.2, seed: int = 0,
                 check_hook: Callable[[int, list], None] | None = None):
        import torch

        if not torch.cuda.is_available():
            raise EmmyError("measuring needs a CUDA GPU and PyTorch finds none here "
                            f"(torch {torch.__version__}, CUDA {torch.version.cuda or 'not compiled in'})")
        self.cache_dir = Path(cache_dir)
        self.device = device_id()
        self.workers = workers or max(1, (os.cpu_count() or 2) - 1)
        self.timeout, self.spill_limit, self.tolerance = timeout, spill_limit, tolerance
        self.reps, self.inner, self.warmup_s, self.seed = reps, inner, warmup_s, seed
        self.check_hook = check_hook
        self._builders: dict[str, Builder] = {}
        self._inputs: dict[tuple[str, str], TaskInputs] = {}
        self._lost: str | None = None  # the error that left the CUDA context unusable
        self._environment: dict[str, str] | None = None

    # Measurer protocol -------------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """The card, its driver, CUDA (the driver's and nvcc's), PyTorch and Emmy versions, and a
        hash of Emmy's source (Python and device library)."""
        import torch

        if self._environment is not None:  # (nvcc --version and the source hash: once)
            return dict(self._environment)
        self._environment = {
            "card": torch.cuda.get_device_name(),
            "driver": _driver_version(),
            "cuda": _cuda_versions(),
            "torch": torch.__version__,
            "emmy": _emmy_version(),
            "source_hash": source_hash(),
        }
        return dict(self._environment)

    def measure(self, task, candidates: Sequence[Mapping[str, object]]) -> list[Measurement]:
        return list(self.measure_each(task, candidates))

    def measure_each(self, task, candidates: Sequence[Mapping[str, object]],
                     started: Callable[[int], None] | None = None) -> Iterator[Measurement]:
        """`measure`, one Measurement at a time; `started(i)` is called once the GPU is held
        for candidate i (what `emmy.measure.child` times against its deadline)."""
        futures = self._builder(task.target).submit_all([BuildJob(task.module, task.kernel, dict(c)) for c in candidates])
        inputs = self._task_inputs(task)  # while the builds run
        for i, future in enumerate(futures):
            built = self._builder(task.target).result(future)
            with gpu_lock(self.cache_dir, self.device):
                if started is not None:
                    started(i)
                m = self._measure_one(i, built, inputs, task.target)
            yield m

    def _measure_one(self, index: int, built: Built, inputs: TaskInputs, target: str) -> Measurement:
        loaded, failed = self._prepare(index, built, inputs, target)
        if failed is not None:
            return failed
        try:
            warm_up({"c": loaded.run}, self.warmup_s)
            samples = sample_replays({"c": loaded.run}, reps=self.reps, inner=self.inner,
                                     calls={"c": len(loaded.bindings)})["c"]
            return self._timed(loaded, samples)
        except Exception as e:  # noqa: BLE001  (the GPU's errors come as many types)
            return self._launch_error(built, e)
        finally:
            _unload(loaded)

    def remeasure(self, task, candidates: Sequence[Mapping[str, object]], rounds: int,
                  started: Callable[[int], None] | None = None) -> list[Measurement]:
        builder = self._builder(task.target)
        futures = builder.submit_all([BuildJob(task.module, task.kernel, dict(c)) for c in candidates])
        inputs = self._task_inputs(task)  # while the builds run
        builts = [builder.result(f) for f in futures]
        with gpu_lock(self.cache_dir, self.device):
            if started is not None:
                started(0)
            return self._remeasure_built(builts, inputs, task.target, rounds)

    def _remeasure_built(self, builts: list[Built], inputs: TaskInputs, target: str, rounds: int) -> list[Measurement]:
        prepared: dict[int, tuple[Built, _Loaded]] = {}
        out: list[Measurement | None] = [None] * len(builts)
        for i, built in enumerate(builts):
            loaded, failed = self._prepare(i, built, inputs, target)
            if failed is not None:
                out[i] = failed
            else:
                prepared[i] = (built, loaded)
        try:
            runs = {str(i): loaded.run for i, (_, loaded) in prepared.items()}
            calls = {str(i): len(loaded.bindings) for i, (_, loaded) in prepared.items()}
            if runs:
                warm_up(runs, self.warmup_s)
            samples = sample_replays(runs, reps=max(1, rounds), inner=self.inner, calls=calls) if runs else {}
            for i, (built, loaded) in prepared.items():
                out[i] = self._timed(loaded, samples[str(i)])
        except Exception as e:  # noqa: BLE001
            for i, (built, _) in prepared.items():
                out[i] = self._launch_error(built, e)
        finally:
            for _, loaded in prepared.values():
                _unload(loaded)
        return [m for m in out if m is not None]

    def close(self) -> None:
        """Stop the build workers."""
        for builder in self._builders.values():
            builder.close()
        self._builders.clear()

    def __enter__(self) -> "GpuMeasurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Steps -----------------------------------------------------------------------------------

    def _builder(self, target: str) -> Builder:
        if target not in self._builders:
            self._builders[target] = Builder(target, self.cache_dir, self.workers, self.timeout, self.spill_limit)
        return self._builders[target]

    def _task_inputs(self, task) -> TaskInputs:
        key = (task.kernel, task.module)
        if key not in self._inputs:
            self._inputs.clear()  # one task at a time: the last task's tensors are let go
            self._inputs[key] = task_inputs(task.module, task.kernel, self.seed, cache_dir=self.cache_dir)
        return self._inputs[key]

    def _prepare(self, index: int, built: Built, inputs: TaskInputs, target: str) -> tuple[_Loaded | None, Measurement | None]:
        """Load, bind and check one built candidate: (loaded, None), or (None, the failure)."""
        if built.status != "ok":
            return None, Measurement(built.status, reason=built.reason, facts=built.facts)
        if self._lost is not None:
            return None, Measurement("launch_error", reason=f"the CUDA context was lost earlier: {self._lost}",
                                     facts=built.facts)
        import torch

        try:
            loaded = load(built.plan, target, self.cache_dir, inputs.values)
            first = loaded.bindings[0]
            first.launch()
            torch.cuda.synchronize()
            outs = list(first.outputs)
            if self.check_hook is not None:
                self.check_hook(index, outs)
            error, nans = check_outputs(outs, inputs.reference, inputs.masks)
        except Exception as e:  # noqa: BLE001
            return None, self._launch_error(built, e)
        facts = {**built.facts, "copies": len(loaded.bindings), "working_set": working_set(built.plan)}
        if not error <= self.tolerance:
            _unload(loaded)
            why = f"{nans} output elements left NaN (never written)" if nans else f"relative error {error:.3g}"
            return None, Measurement("wrong", error=error, reason=f"{why}; the tolerance is {self.tolerance:g}",
                                     facts=facts)
        loaded.error, loaded.facts = error, facts
        return loaded, None

    def _timed(self, loaded: _Loaded, samples: list[float]) -> Measurement:
        median, spread = summarize(samples)
        return Measurement("ok", time_s=median, spread=spread, error=loaded.error,
                           facts={**loaded.facts, "samples": len(samples)})

    def _launch_error(self, built: Built, e: Exception) -> Measurement:
        import torch

        reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        try:  # is the context still usable?
            torch.cuda.synchronize()
            torch.zeros(1, device="cuda").add_(1).item()
        except Exception as again:  # noqa: BLE001
            self._lost = f"{reason} ({type(again).__name__})"
        return Measurement("launch_error", reason=reason, facts=built.facts)


def pinned_measurer(cache_dir: Path, device: int | None = None) -> GpuMeasurer:
    """A GpuMeasurer on GPU `device` (PyTorch's current device from now on in this process: the
    context it launches in and the lock it takes), or on the current one."""
    if device is not None:
        import torch

        torch.cuda.set_device(device)
    return GpuMeasurer(cache_dir=Path(cache_dir))


def device_id() -> str:
    """The current CUDA device's UUID (its index where PyTorch gives none)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return str(getattr(props, "uuid", "") or torch.cuda.current_device())


def lock_path(cache_dir: Path, device: str) -> Path:
    return Path(cache_dir) / "locks" / f"gpu-{device}.lock"


@contextmanager
def gpu_lock(cache_dir: Path, device: str):
    """Hold a GPU for measuring: an exclusive lock on a file named after the device (`device_id`)
    in the kernel cache's folder, so that measuring processes on one host take turns on a GPU
    (each checks and times only while it holds the lock; their builds run meanwhile)."""
    from emmy.backend.run import cache_lock

    with cache_lock(lock_path(cache_dir, device)):
        yield


# ------------------------------------------------------------------------------------------------
# Loading a candidate
# ------------------------------------------------------------------------------------------------


def working_set(plan) -> int:
    """Bytes one call reads and writes: every buffer of the plan but the prepared ones."""
    return sum(b.nbytes for b in plan.buffers if b.role != "prepared")


def load(plan, target: str, cache_dir: Path, values: Mapping[str, object]) -> _Loaded:
    """The plan's module loaded and bound to `values` and to as many copies of them (each with
    its own outputs and temporaries) as it takes to keep a call's data out of L2 between calls."""
    from emmy.backend.run import GpuModule

    module = GpuModule(plan, target, cache_dir)
    copies = rotation_count(working_set(plan), l2_bytes())
    bindings = [module.bind(dict(values))]
    for _ in range(copies - 1):
        bindings.append(module.bind({k: v.clone() for k, v in values.items()}))

    def call() -> None:
        for b in bindings:
            b.launch()

    loaded = _Loaded(module, bindings, call)
    loaded.run = _Replay(call)
    return loaded


class _Replay:
    """Captures the call on its first use (after the check), so that a wrong candidate is never
    captured."""

    def __init__(self, call: Callable[[], None]):
        self.call = call
        self.replay: Callable[[], object] | None = None

    def __call__(self) -> None:
        if self.replay is None:
            self.replay = replayable(self.call)
        self.replay()


def _unload(loaded: _Loaded | None) -> None:
    if loaded is None:
        return
    module = loaded.module
    loaded.bindings.clear()
    loaded.run = None  # type: ignore[assignment]
    try:
        module.driver.cuModuleUnload(module.module)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001  (a lost context: nothing left to free)
        pass


# ------------------------------------------------------------------------------------------------
# Environment
# ------------------------------------------------------------------------------------------------


def source_hash() -> str:
    """sha256 (first 16 hex digits) over Emmy's Python sources and device library, by path."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".cuh", ".h", ".json")):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _emmy_version() -> str:
    import emmy

    return emmy.__version__


def _driver_version() -> str:
    """The NVIDIA kernel driver's version (/proc/driver/nvidia/version), else the CUDA driver
    API's."""
    try:
        first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
        for word in first.split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    except (OSError, IndexError):
        pass
    try:
        from emmy.backend.run import _driver

        err, version = _driver().cuDriverGetVersion()
        if int(err) == 0:
            return f"cuda-driver {version // 1000}.{version % 1000 // 10}"
    except Exception:  # noqa: BLE001
        pass
    return "unknown"


def _cuda_versions() -> str:
    """PyTorch's CUDA and nvcc's release (the toolkit that builds the kernels)."""
    import torch

    from emmy.backend.nvcc import nvcc_path

    nvcc = "none"
    path = nvcc_path()
    if path:
        try:
            text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
            nvcc = next((line.split("release")[1].split(",")[0].strip() for line in text.splitlines()
                         if "release" in line), "unknown")
        except (OSError, subprocess.TimeoutExpired):
            nvcc = "unknown"
    return f"torch {torch.version.cuda}, nvcc {nvcc}"


__all__ = ["DEFAULT_TOLERANCE", "GpuMeasurer", "device_id", "gpu_lock", "load", "pinned_measurer", "source_hash",
           "working_set"]
