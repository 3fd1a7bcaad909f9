"""Measuring in a child process with a deadline: a measurement that cannot hang a run.

    measurer = ChildMeasurer(partial(make_gpu_measurer, home, device), deadline_s=60)
    measurer.measure(task, candidates)   # one Measurement per candidate, as the measurer's own
    measurer.replaced                    # why each child process was stopped and replaced
    measurer.close()

A kernel that never finishes cannot be stopped inside the process that launched it, so the
measurer (`make()`: a GpuMeasurer, pinned to its GPU) lives in a child process (`spawn`), and
this process waits for each answer with a deadline:

- once the child holds the GPU for a candidate (it says so: `started`), the candidate has
  `deadline_s` seconds to be checked and timed; past them the child is killed and the
  candidate is a "timeout" Measurement (its reason says why), and `measure` returns without
  the candidates after it (the next request starts a fresh child);
- before that (its build, the task's reference, waiting for the GPU's lock while another
  process measures), `prepare_s` seconds; past them every candidate left in the request is a
  "timeout" (a fresh child would spend as long on them again);
- a child that dies (a crash in the driver) makes its candidate a "launch_error" and is
  replaced; the candidates after it go to the fresh child.

The caller's bookkeeping (the Optuna trial) stays in the caller: no trial is lost or left
RUNNING by a kill. The child exits when this process does (its end of the pipe closes; on Linux
it is also killed with its parent, `PR_SET_PDEATHSIG`).

Protocol (tuples over a `multiprocessing` pipe): requests `("environment",)`,
`("measure", task, candidates)`, `("remeasure", task, candidates, rounds)`; answers
`("started", i)`, `("result", m)`, `("value", x)`, `("error", message, hint)`. A measurer
without `measure_each(task, candidates, started)` gets one candidate per call, `started`
said before each.
"""

from __future__ import annotations

import ctypes
import signal
from collections.abc import Callable, Mapping, Sequence
from multiprocessing import get_context

from emmy.diagnostics import EmmyError, first_line
from emmy.measure import Measurement

DEFAULT_DEADLINE_S = 60.0
# seconds for what comes before a candidate's GPU work: its build (nvcc's own time limit is 180 s,
# emmy.measure.builds), the reference, the GPU lock
PREPARE_S = 420.0


class ChildMeasurer:
    """A Measurer (`emmy.measure.Measurer`) whose work runs in a child process that is killed
    and replaced when a candidate passes its deadline (see the module docstring)."""

    def __init__(self, make: Callable[[], object], deadline_s: float = DEFAULT_DEADLINE_S,
                 prepare_s: float = PREPARE_S):
        self.make, self.deadline_s, self.prepare_s = make, deadline_s, prepare_s
        self.replaced: list[str] = []  # why each child was stopped
        self._proc = None
        self._conn = None
        self._environment: dict[str, str] | None = None
        self._died = False  # the last answer did not come because the child died

    # Measurer protocol -------------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        if self._environment is None:
            answer = self._ask(("environment",), self.prepare_s)
            if answer is None or answer[0] != "value":
                raise EmmyError("the measuring process gave no description of its GPU "
                                f"({self.replaced[-1] if self.replaced else 'no answer'})")
            self._environment = dict(answer[1])
        return dict(self._environment)

    def measure(self, task, candidates: Sequence[Mapping[str, object]]) -> list[Measurement]:
        """One Measurement per candidate, except after a timeout on the GPU: the candidates
        after it are not measured (a shorter list; the caller's time budget is looked at before
        a fresh child spends a deadline on each of a family of hanging kernels)."""
        out: list[Measurement] = []
        left = [dict(c) for c in candidates]
        while left:
            got, failed = self._measure(task, left)
            out += got
            if failed is None:
                break
            stage, m = failed
            rest = left[len(got):]
            if stage == "prepare":  # a fresh child would spend as long on each of them
                out += [m] * len(rest)
                break
            out.append(m)
            if m.status == "timeout":
                break
            left = rest[1:]
        return out

    def remeasure(self, task, candidates: Sequence[Mapping[str, object]], rounds: int) -> list[Measurement]:
        if not candidates:
            return []
        deadline = self.deadline_s * len(candidates)  # all of them, interleaved
        stage = "prepare"
        self._send(("remeasure", task, [dict(c) for c in candidates], rounds))
        while True:
            answer = self._receive(deadline if stage == "gpu" else self.prepare_s)
            if answer is None:
                return [self._failure(stage, deadline)[1]] * len(candidates)
            if answer[0] == "started":
                stage = "gpu"
            elif answer[0] == "value":
                return list(answer[1])

    def close(self) -> None:
        """Stop the child (it finishes nothing: call between requests)."""
        if self._proc is not None:
            self._conn.close()
            self._proc.join(timeout=10)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
            self._proc = self._conn = None

    def __enter__(self) -> "ChildMeasurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # The child ---------------------------------------------------------------------------------

    def _measure(self, task, candidates: list[dict]) -> tuple[list[Measurement], tuple[str, Measurement] | None]:
        """The Measurements the child gave for `candidates` in order, and where it stopped short:
        (stage, the Measurement of the candidate it was on) or None."""
        self._send(("measure", task, candidates))
        got: list[Measurement] = []
        stage = "prepare"
        while len(got) < len(candidates):
            answer = self._receive(self.deadline_s if stage == "gpu" else self.prepare_s)
            if answer is None:
                return got, self._failure(stage, self.deadline_s)
            if answer[0] == "started":
                stage = "gpu"
            elif answer[0] == "result":
                got.append(answer[1])
                stage = "prepare"
        return got, None

    def _failure(self, stage: str, deadline: float) -> tuple[str, Measurement]:
        """Stop the child after a missed deadline or its death; the Measurement of the
        candidate it was on."""
        proc, dead = self._proc, self._died
        if dead and proc is not None:
            proc.join(timeout=10)
        self._kill()
        if dead:
            why = (f"the measuring process died (exit code {proc.exitcode if proc else None}) while "
                   f"{'measuring' if stage == 'gpu' else 'preparing'} this candidate; it was replaced")
            self.replaced.append(why)
            return stage, Measurement("launch_error", reason=why)
        if stage == "gpu":
            why = (f"timeout: the candidate was not checked and timed within {deadline:g} s of taking the GPU "
                   "(its kernel may never finish); the measuring process was stopped and replaced")
        else:
            why = (f"timeout: no answer within {self.prepare_s:g} s while building, computing the reference or "
                   "waiting for the GPU; the measuring process was stopped and replaced")
        self.replaced.append(why)
        return stage, Measurement("timeout", reason=why)

    def _ask(self, request: tuple, limit: float):
        self._send(request)
        answer = self._receive(limit)
        if answer is None:
            self._failure("prepare", limit)
        return answer

    def _send(self, request: tuple) -> None:
        """Send a request, to a fresh child where there is none (or the last one died idle)."""
        if self._proc is not None and not self._proc.is_alive():
            self.replaced.append(f"the measuring process died (exit code {self._proc.exitcode}) between "
                                 "candidates; it was replaced")
            self._kill()
        if self._proc is None:
            ctx = get_context("spawn")
            mine, theirs = ctx.Pipe()
            self._proc = ctx.Process(target=serve, args=(theirs, self.make), name="emmy-measure")
            self._proc.start()
            theirs.close()
            self._conn = mine
        self._conn.send(request)

    def _receive(self, limit: float):
        """The child's next answer, or None when it gave none within `limit` seconds or died.
        An error it reports is raised here."""
        self._died = False
        try:
            if not self._conn.poll(limit):
                return None
            answer = self._conn.recv()
        except (EOFError, OSError):
            self._died = True
            return None
        if answer[0] == "error":
            self._kill()
            raise EmmyError(answer[1], hint=answer[2] or None)
        return answer

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join()
            self._conn.close()
            self._proc = self._conn = None


def serve(conn, make: Callable[[], object]) -> None:
    """The child: make the measurer, then answer requests until the pipe closes (or Ctrl-C)."""
    die_with_parent()
    measurer = None
    try:
        try:
            measurer = make()
        except EmmyError as e:
            conn.send(("error", e.message, e.hint or ""))
            return
        while True:
            request = conn.recv()
            try:
                _answer(conn, measurer, request)
            except EmmyError as e:
                conn.send(("error", e.message, e.hint or ""))
            except Exception as e:  # noqa: BLE001  (a bug: said in words, the run stops cleanly)
                conn.send(("error", f"the measuring process failed: {first_line(e)}", ""))
    except (EOFError, OSError, KeyboardInterrupt):
        pass
    finally:
        close = getattr(measurer, "close", None)
        if close is not None:
            close()


def _answer(conn, measurer, request: tuple) -> None:
    kind, *args = request
    started = lambda i: conn.send(("started", i))  # noqa: E731
    staged = hasattr(measurer, "measure_each")
    if kind == "environment":
        conn.send(("value", measurer.environment()))
    elif kind == "measure":
        task, candidates = args
        if staged:
            for m in measurer.measure_each(task, candidates, started):
                conn.send(("result", m))
        else:
            for i, c in enumerate(candidates):
                started(i)
                conn.send(("result", measurer.measure(task, [c])[0]))
    elif kind == "remeasure":
        task, candidates, rounds = args
        if staged:
            conn.send(("value", measurer.remeasure(task, candidates, rounds, started)))
        else:
            started(0)
            conn.send(("value", measurer.remeasure(task, candidates, rounds)))


def die_with_parent() -> None:
    """Linux: this process gets SIGKILL when its parent dies (a killed `emmy tune` leaves no
    worker measuring on, a killed worker no child hung on the GPU holding its lock)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


__all__ = ["DEFAULT_DEADLINE_S", "PREPARE_S", "ChildMeasurer", "die_with_parent", "serve"]
