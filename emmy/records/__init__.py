"""The tuning store: records of measured schedules, kept in Optuna's storage.

- `record`: `Record` (a kernel key's recorded best with its measurement and machine), `SCHEMA`.
- `store`: `open_store(url)`, `best_record(store, key)`, the store's layout and its checks.
- `transfer`: `export_records` / `import_records` / `import_layers` (schema-versioned JSON).
- `layer`: `LayerCheck`, a layer timed with all its tuned answers and the kernels whose tuned
  answer lost there (`write_layer_check`, `layer_checks`).
- `efficiency`: how many trials each study took to come within a few percent of its fastest.
"""

from emmy.records.record import SCHEMA, Record
from emmy.records.store import Store, best_record, default_url, open_store

__all__ = ["SCHEMA", "Record", "Store", "best_record", "default_url", "open_store"]
