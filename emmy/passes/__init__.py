"""Emmy's passes, one per file, each a frozen-dataclass xDSL ModulePass."""
