"""Writing EMMY_DUMP_DIR: the module after every pass, the CUDA source, the decisions."""

from __future__ import annotations

import json
import re
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

    def write_source(self, func_name: str, source: str | None) -> None:
        if source is not None:
            self._write(f"{func_name}.cu", source)

    def write_decisions(self, decisions) -> None:
        if not decisions:
            return
        rows = [
            {"kernel": d.kernel, "knob": d.knob, "value": d.value, "tier": d.tier, "reason": d.reason}
            for d in decisions
        ]
        self._write("decisions.json", json.dumps(rows, indent=2) + "\n")
