# lit configuration for Emmy's FileCheck tests (test/filecheck).
import os
import sys

import lit.formats

config.name = "Emmy"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = config.test_source_root
# Sample inputs shared by tests, the Python tree and the virtual environment hold no lit tests.
config.excludes = ["inputs", "emmy", ".venv", "docs", "tools", "golden", "build"]

# emmy-opt, emmy and filecheck live next to the Python that runs lit.
bindir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])
for var in ("HOME", "TMPDIR", "EMMY_HOME"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

config.substitutions.append(
    ("%emmy-roundtrip", "emmy-opt %s --split-input-file --print-op-generic | emmy-opt --split-input-file")
)
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "test", "filecheck", "inputs")))
