"""Compile generated CUDA C++ with nvcc.

    path = compile_source(source, "sm_90a", out_dir)              # out_dir/emmy.cubin
    lib = compile_source(source, "sm_90", out_dir, cubin=False)   # out_dir/emmy.so (ctypes-loadable)
    report = ptxas_report(source, "sm_90a", out_dir)              # {kernel: PtxasInfo}
    path, report = compile_with_report(source, "sm_90a", out_dir, timeout=60)  # both from one run
    text = sass(path)                                              # cuobjdump --dump-sass, or None

Architectures: `sm_80`, `sm_86`, `sm_89`, `sm_90` (`-arch=sm_XX`) and `sm_90a`
(`-gencode=arch=compute_90a,code=sm_90a`, which wgmma needs). Flags: `-std=c++17 -O3
-I <emmy/backend/runtime>`. A failed build raises EmmyError with nvcc's message, the kernels the
errors point into, and the path of the saved source; one past its time limit raises BuildTimeout
(an EmmyError), nvcc and the compilers it started stopped.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from emmy.backend import runtime_dir
from emmy.diagnostics import EmmyError
from emmy.targets import target_names

ARCHES = tuple(target_names())
_KERNEL_DEF = re.compile(r'extern "C" __global__ void(?: __launch_bounds__\([^)]*\))? (\w+)\(')


def runtime_digest() -> str:
    """A hash of Emmy's device library (the headers every kernel includes), so that a cache of
    built kernels keyed on it never serves a cubin built against other headers."""
    h = hashlib.sha256()
    for f in sorted(runtime_dir().iterdir()):
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


def cuobjdump_path() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    nvcc = nvcc_path()
    if nvcc:
        candidate = Path(nvcc).resolve().parent / "cuobjdump"
        if candidate.exists():
            return str(candidate)
    return None


def arch_flags(arch: str) -> list[str]:
    if arch not in ARCHES:
        raise EmmyError(f"nvcc: unknown architecture '{arch}'; valid: {', '.join(ARCHES)}")
    if arch == "sm_90a":
        return ["-gencode=arch=compute_90a,code=sm_90a"]
    return [f"-arch={arch}"]


def base_flags(arch: str) -> list[str]:
    return ["-std=c++17", "-O3", "-I", str(runtime_dir()), *arch_flags(arch)]


def _kernel_lines(source: str) -> list[tuple[int, str]]:
    """(first line, kernel name) of every kernel definition in the source."""
    out = []
    for i, line in enumerate(source.splitlines(), start=1):
        m = _KERNEL_DEF.search(line)
        if m:
            out.append((i, m.group(1)))
    return out


def _kernels_in_errors(source: str, stderr: str, src_name: str) -> list[str]:
    starts = _kernel_lines(source)
    names: list[str] = []
    for m in re.finditer(re.escape(src_name) + r"\((\d+)\)", stderr):
        line = int(m.group(1))
        owner = None
        for start, name in starts:
            if start <= line:
                owner = name
        if owner and owner not in names:
            names.append(owner)
    for m in re.finditer(r"(?:function|entry function) '(\w+)'", stderr):
        if m.group(1) not in names and any(m.group(1) == n for _, n in starts):
            names.append(m.group(1))
    return names


class BuildTimeout(EmmyError):
    """nvcc ran past its time limit (it and the compilers it started were stopped)."""


def _run(cmd: list[str], source: str, src: Path, timeout: float) -> subprocess.CompletedProcess:
    try:  # a session of its own, so that a timeout stops cicc and ptxas too, not only nvcc
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    except FileNotFoundError:
        raise EmmyError("nvcc is not on PATH; install the CUDA toolkit or add it to PATH") from None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise BuildTimeout(f"nvcc: compiling {src} took more than {timeout:g} s") from None
    done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    if done.returncode != 0:
        msg = (done.stderr or done.stdout).strip()
        lines = msg.splitlines()
        if len(lines) > 40:
            msg = "\n".join(lines[:40] + [f"... ({len(lines) - 40} more lines)"])
        kernels = _kernels_in_errors(source, done.stderr + done.stdout, src.name)
        where = f" in kernel {', '.join(kernels)}" if kernels else ""
        raise EmmyError(f"nvcc failed{where} (source saved at {src}):\n{msg}")
    return done


def compile_source(
    source: str,
    arch: str,
    out_dir: str | Path,
    *,
    cubin: bool = True,
    name: str = "emmy",
    extra_flags: tuple[str, ...] = (),
    timeout: float = 600.0,
) -> Path:
    """Compile `source` for `arch` into `out_dir`: a cubin (default) or, with cubin=False, a shared
    library exporting the host entry points. The source is saved as `out_dir/<name>.cu`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    src = out / f"{name}.cu"
    src.write_text(source)
    nvcc = nvcc_path()
    if nvcc is None:
        raise EmmyError(f"nvcc is not on PATH (source saved at {src})")
    if cubin:
        target = out / f"{name}.cubin"
        cmd = [nvcc, *base_flags(arch), "-cubin", *extra_flags, "-o", str(target), str(src)]
    else:
        target = out / f"{name}.so"
        cmd = [nvcc, *base_flags(arch), "-shared", "-Xcompiler", "-fPIC", *extra_flags, "-o", str(target), str(src)]
    _run(cmd, source, src, timeout)
    return target


@dataclass(frozen=True)
class PtxasInfo:
    kernel: str
    registers: int
    smem: int  # static shared memory bytes
    stack: int  # stack frame bytes
    spill_stores: int
    spill_loads: int
    # ptxas's C7515 note: non-wgmma instructions write a wgmma accumulator inside its pipeline
    # stage, so ptxas serializes the kernel's wgmmas
    wgmma_serialized: bool = False


_FUNC = re.compile(r"Compiling entry function '(\w+)'")
_REGS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SERIALIZED = re.compile(r"wgmma\.mma_async instructions are serialized .* in the function '(\w+)'")


def parse_ptxas(text: str) -> dict[str, PtxasInfo]:
    infos: dict[str, PtxasInfo] = {}
    current = None
    fields: dict[str, int] = {}
    for line in text.splitlines():
        m = _FUNC.search(line)
        if m:
            if current is not None:
                infos[current] = PtxasInfo(current, **_fill(fields))
            current, fields = m.group(1), {}
            continue
        if current is None:
            continue
        if (m := _STACK.search(line)) is not None:
            fields["stack"], fields["spill_stores"], fields["spill_loads"] = map(int, m.groups())
        if (m := _REGS.search(line)) is not None:
            fields["registers"] = int(m.group(1))
            if (s := _SMEM.search(line)) is not None:
                fields["smem"] = int(s.group(1))
    if current is not None:
        infos[current] = PtxasInfo(current, **_fill(fields))
    for name in _SERIALIZED.findall(text):
        if name in infos:
            infos[name] = replace(infos[name], wgmma_serialized=True)
    return infos


def _fill(f: dict[str, int]) -> dict[str, int]:
    return {k: f.get(k, 0) for k in ("registers", "smem", "stack", "spill_stores", "spill_loads")}


def ptxas_report(source: str, arch: str, out_dir: str | Path, *, name: str = "emmy_ptxas") -> dict[str, PtxasInfo]:
    """Registers, static shared memory, stack, spills and serialized wgmmas of every kernel
    (nvcc -Xptxas -v)."""
    return compile_with_report(source, arch, out_dir, name=name)[1]


def compile_with_report(
    source: str, arch: str, out_dir: str | Path, *, name: str = "emmy", timeout: float = 600.0
) -> tuple[Path, dict[str, PtxasInfo]]:
    """A cubin (`out_dir/<name>.cubin`) and ptxas's report on each of its kernels, from one nvcc
    run (-Xptxas -v). A run past `timeout` seconds raises BuildTimeout."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    src = out / f"{name}.cu"
    src.write_text(source)
    nvcc = nvcc_path()
    if nvcc is None:
        raise EmmyError(f"nvcc is not on PATH (source saved at {src})")
    target = out / f"{name}.cubin"
    cmd = [nvcc, *base_flags(arch), "-cubin", "-Xptxas", "-v", "-o", str(target), str(src)]
    proc = _run(cmd, source, src, timeout)
    return target, parse_ptxas(proc.stderr + proc.stdout)


def sass(binary: str | Path) -> str | None:
    """`cuobjdump --dump-sass` of a cubin or object file; None when cuobjdump is not available."""
    tool = cuobjdump_path()
    if tool is None:
        return None
    proc = subprocess.run([tool, "--dump-sass", str(binary)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise EmmyError(f"cuobjdump failed on {binary}: {proc.stderr.strip()}")
    return proc.stdout


__all__ = [
    "ARCHES",
    "BuildTimeout",
    "PtxasInfo",
    "arch_flags",
    "compile_source",
    "compile_with_report",
    "cuobjdump_path",
    "nvcc_path",
    "parse_ptxas",
    "ptxas_report",
    "sass",
]
