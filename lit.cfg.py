# lit configuration for Emmy's FileCheck tests (test/filecheck).
import os
import sys

import lit.formats

config.name = "Emmy"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mlir"]
config.test_source_root = os.path.join(os.path.dirname(__file__), "test", "filecheck")
config.excludes = ["lit.cfg.py", "inputs"]

# emmy-opt, emmy and filecheck live next to the Python that runs lit.
bindir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])
for var in ("HOME", "TMPDIR", "EMMY_HOME"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

config.substitutions.append(
    ("%emmy-roundtrip", "emmy-opt %s --split-input-file --print-op-generic | emmy-opt --split-input-file")
)
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "inputs")))
