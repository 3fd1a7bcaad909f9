"""Writing EMMY_DUMP_DIR: the module after every pass, the CUDA source with a `build.sh` that builds
it, the decisions."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from pathlib import Path

from emmy.diagnostics import EmmyError
from emmy.ir_io import print_module

_DUMP_FILE = re.compile(r"^\d\d-[a-z0-9-]+\.mlir$")


class DumpWriter:
    def __init__(self, directory: Path):
        self.directory = directory
        self.count = 0
        self._index = 0
        try:
            directory.mkdir(parents=True, exist_ok=True)
            # Old dumps from a longer pipeline would be misleading next to this one.
            for old in directory.iterdir():
                if _DUMP_FILE.match(old.name):
                    old.unlink()
        except OSError as e:
            raise EmmyError(f"EMMY_DUMP_DIR: cannot use '{directory}': {e.strerror}") from None

    def _write(self, name: str, text: str) -> None:
        try:
            (self.directory / name).write_text(text)
        except OSError as e:
            raise EmmyError(f"EMMY_DUMP_DIR: cannot write '{self.directory / name}': {e.strerror}") from None
        self.count += 1

    def write_stage(self, pass_name: str, module) -> str:
        text = print_module(module)
        self._write(f"{self._index:02d}-{pass_name}.mlir", text)
        self._index += 1
        return text

    def write_source(self, func_name: str, source: str | None, arch: str) -> None:
        """`<func>.cu`, and `build.sh` beside it: the nvcc command Emmy builds it with for `arch`
        (with `-I` Emmy's runtime headers), making the shared library `<func>.so` that exports the
        host entry points."""
        if source is None:
            return
        from emmy.backend.nvcc import base_flags

        self._write(f"{func_name}.cu", source)
        cmd = ["nvcc", *base_flags(arch), "-shared", "-Xcompiler", "-fPIC", "-o", f"{func_name}.so", f"{func_name}.cu"]
        script = (
            "#!/bin/sh\n"
            f"# Builds {func_name}.cu for {arch} with the flags Emmy uses (-I: Emmy's device library headers),\n"
            "# as a shared library exporting the host entry points.\n"
            "set -e\n"
            'cd "$(dirname "$0")"\n'
            + " ".join(shlex.quote(c) for c in cmd) + "\n"
        )
        self._write("build.sh", script)
        with contextlib.suppress(OSError):  # where the file system has no modes, `sh build.sh` still runs it
            (self.directory / "build.sh").chmod(0o755)

    def write_decisions(self, decisions) -> None:
        """`decisions.json`: one row per knob (`emmy.cli.report.KeyedDecision`), with its kernel's key."""
        if not decisions:
            return
        rows = [
            {"kernel": d.kernel, "key": d.key, "knob": d.knob, "value": d.value, "tier": d.tier, "reason": d.reason,
             **({"source": d.source} if d.source else {})}
            for d in decisions
        ]
        self._write("decisions.json", json.dumps(rows, indent=2) + "\n")
        evidence = {d.kernel: d.evidence for d in decisions if d.evidence is not None}
        if evidence:  # per kernel: its key, sources, skipped evidence, why higher tiers had no answer
            self._write("evidence.json", json.dumps(evidence, indent=2, sort_keys=True) + "\n")
