"""The tuning store: Optuna's RDB storage, one study per kernel key, and Emmy's schema on top.

    store = open_store("sqlite:////home/me/.cache/emmy/records.db")   # or postgresql://...
    store.study_names()                  # the kernel keys tuned so far
    best_record(store, key)              # Record | None: the study's recorded best

Layout (schema `SCHEMA`, `emmy.records.record`):
- a study named `emmy.store` holds the user attribute `schema` (the layout version of the store;
  a store written by a newer Emmy is refused, never rewritten);
- one study per kernel key, named by the key id (`KernelKey.id`), minimizing seconds per call.
  Its user attributes: `emmy.key` (the key's fields: id, structure_id, structure, shape, target,
  version), `emmy.kernel` (the kernel's name where it was first tuned), `emmy.description`,
  and `emmy.best` once a tuning run has named one (trial, values, time_s, spread, error, env,
  date, measured, default_s; where the space has a structural fork, `fork_knobs` and `fork`:
  each branch's best re-measured in the same rounds; `emmy.search.study` writes it after
  re-measuring the top candidates interleaved);
- one study per layer check, named `emmy.layer.<signature>`, with no trials and the user
  attribute `emmy.layer` (`emmy.records.layer`: a layer timed with its tuned answers together,
  and the kernels whose tuned answer lost there);
- one trial per measured candidate; its user attributes: `values` (knob -> value), `status`
  (`emmy.measure.STATUSES`), `time_s`, `spread`, `error`, `reason`, `env` (card, driver, cuda,
  torch, emmy, source_hash), `date`, `uid`. A candidate that failed (did not build, computed the
  wrong numbers, spilled, ...) is a FAIL trial with its status and reason; a COMPLETE trial's value
  is its time. A PRUNED trial is a draw that repeated a measured (or being measured) candidate
  and was not measured again (`reason` names the trial it repeats), or one moved to a starved
  branch of a structural fork (`reason` "moved to BRANCH ...").

Bad stores are reported, never repaired: a file that is not an SQLite database, a directory or
an unreadable file in its place, a read-only directory, a URL that is not a database URL, a
server that cannot be reached, a store of a newer schema (Emmy's or Optuna's) are each an
EmmyError naming the store (`store_errors` turns database errors met later into one too).
"""

from __future__ import annotations

import contextlib
import errno
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from emmy.diagnostics import EmmyError, first_line
from emmy.records.record import SCHEMA, Record, record_from

# The studies of layer checks (emmy.records.layer): not kernel keys.
LAYER_PREFIX = "emmy.layer."

META_STUDY = "emmy.store"
DEFAULT_FILE = "records.db"
SQLITE_MAGIC = b"SQLite format 3\x00"

# Attribute names (study user attributes).
KEY_ATTR = "emmy.key"
KERNEL_ATTR = "emmy.kernel"
DESCRIPTION_ATTR = "emmy.description"
MODULE_ATTR = "emmy.module"  # the isolated tile-stage module a study measured (its legal space, the prior's features)
MODEL_ATTR = "emmy.model"  # the model a study's kernel was first tuned from (the prior's leave-one-model-out)
SPACE_ATTR = "emmy.space_size"  # the number of legal points of the study's space (a run that measured them all is done)
BEST_ATTR = "emmy.best"

# Seconds between a measuring worker's heartbeats, and after which a silent worker's running
# trial is failed (a worker killed mid-trial leaves no trial running forever).
HEARTBEAT_S = 2
GRACE_S = 30


def default_url(home: Path) -> str:
    """The default store: SQLite file `records.db` in Emmy's home directory (EMMY_HOME)."""
    return f"sqlite:///{Path(home).absolute() / DEFAULT_FILE}"


def sqlite_path(url: str) -> Path | None:
    """The file of an SQLite URL (None for other databases and in-memory SQLite)."""
    if not url.startswith("sqlite:"):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    return Path(database) if database and database != ":memory:" else None


def display_url(url: str) -> str:
    """The URL with any password hidden."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def store_exists(url: str) -> bool:
    """Whether there is something at `url` to read records from without creating anything: an
    existing SQLite file; any non-SQLite URL counts as existing (the server is asked later)."""
    path = sqlite_path(url)
    return path is None or path.exists()


@dataclass
class Store:
    """An open store: `url` (as given), `name` (for messages, password hidden) and the Optuna
    storage."""

    url: str
    name: str
    storage: object  # optuna.storages.RDBStorage

    def study_names(self) -> list[str]:
        """The kernel keys with a study, sorted."""
        return [s.study_name for s in self.studies()]

    def studies(self) -> list:
        """The kernel keys' studies with their user attributes, in one query (Optuna's
        `FrozenStudy`: `study_name`, `user_attrs`), sorted by name."""
        return sorted((s for s in self.storage.get_all_studies()
                       if s.study_name != META_STUDY and not s.study_name.startswith(LAYER_PREFIX)),
                      key=lambda s: s.study_name)

    def layer_names(self) -> list[str]:
        """The studies of layer checks (`emmy.records.layer`), sorted."""
        return sorted(s.study_name for s in self.storage.get_all_studies() if s.study_name.startswith(LAYER_PREFIX))

    def study_attrs(self, name: str) -> dict | None:
        """A study's user attributes (None when there is no such study)."""
        import optuna

        try:
            sid = self.storage.get_study_id_from_name(name)
        except KeyError:
            return None
        except optuna.exceptions.OptunaError:  # pragma: no cover - other storages
            return None
        return self.storage.get_study_user_attrs(sid)

    def load(self, name: str, sampler=None):
        """The Optuna study of a key (KeyError when there is none)."""
        import optuna

        return optuna.load_study(study_name=name, storage=self.storage, sampler=sampler)


def open_store(url: str, *, create: bool = True) -> Store | None:
    """Open (and with `create`, make where missing) the store at `url`.

    Without `create`, a missing SQLite file gives None and nothing is written. Every problem is
    an EmmyError naming the store; a file that is there is never overwritten or repaired."""
    name = display_url(url)
    _check_url(url, name)
    path = sqlite_path(url)
    if path is not None:
        if not path.exists() and not create:
            return None
        _check_sqlite_file(path, name, create)
    with store_errors(name):
        storage = _storage(url)
        _check_schema(storage, name, create)
    return Store(url=url, name=name, storage=storage)


def best_record(store: Store | None, key, attrs: Mapping | None = None) -> Record | None:
    """The recorded best of a kernel key (a `KernelKey` or its id), or None. `attrs`: the study's
    attributes where the caller has read them already (walking every study)."""
    if store is None:
        return None
    key_id = key if isinstance(key, str) else key.id
    if attrs is None:
        with store_errors(store.name):
            attrs = store.study_attrs(key_id)
    if not attrs or BEST_ATTR not in attrs:
        return None
    fields = attrs.get(KEY_ATTR) or {}
    try:
        return record_from(
            attrs[BEST_ATTR], key=key_id, kernel=str(attrs.get(KERNEL_ATTR, "")),
            target=str(fields.get("target", "")), store=store.name,
            description=str(attrs.get(DESCRIPTION_ATTR, "")),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise EmmyError(f"store {store.name}: study {key_id}: its recorded best is malformed ({first_line(e)})") from None


@contextlib.contextmanager
def store_errors(name: str) -> Iterator[None]:
    """Database errors as EmmyErrors naming the store (no traceback, nothing rewritten)."""
    import sqlalchemy.exc

    try:
        yield
    except sqlalchemy.exc.OperationalError as e:
        text = str(e.orig if getattr(e, "orig", None) is not None else e).strip().splitlines()[0]
        if "readonly" in text or "read-only" in text:
            raise EmmyError(f"store {name} is read-only ({text})",
                            hint="give a writable --storage, or set EMMY_HOME to a writable directory") from None
        raise EmmyError(f"cannot use the store {name}: {text}",
                        hint="check that the database server is running and reachable") from None
    except sqlalchemy.exc.DatabaseError as e:
        text = str(e.orig if getattr(e, "orig", None) is not None else e).strip().splitlines()[0]
        raise EmmyError(f"store {name} is not a readable tuning store ({text}); it was left as it is") from None
    except sqlalchemy.exc.SQLAlchemyError as e:
        raise EmmyError(f"store {name}: {first_line(e)}") from None


def _check_url(url: str, name: str) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    example = "e.g. sqlite:////path/to/records.db or postgresql://user@host/dbname"
    try:
        parsed = make_url(url)
        parsed.get_dialect()
    except NoSuchModuleError:
        raise EmmyError(f"--storage '{name}': unknown database kind '{url.split(':', 1)[0]}'", hint=example) from None
    except (ArgumentError, ValueError):
        raise EmmyError(f"--storage '{name}' is not a database URL", hint=example) from None
    except ImportError as e:
        raise EmmyError(f"--storage '{name}': its database driver is not installed ({first_line(e)})") from None


def _check_sqlite_file(path: Path, name: str, create: bool) -> None:
    """An SQLite file must be a readable SQLite database (or empty, or missing and creatable)."""
    if path.is_dir():
        raise EmmyError(f"store {name}: {path} is a directory, not a store file")
    if path.exists():
        try:
            with open(path, "rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except OSError as e:
            raise EmmyError(f"store {name}: cannot read {path}: {e.strerror}") from None
        if head and head != SQLITE_MAGIC:
            raise EmmyError(f"store {name}: {path} is not an SQLite database (corrupt, or another "
                            "kind of file); it was left as it is",
                            hint="move it away, or give another --storage")
        if not os.access(path.parent, os.W_OK) and create:
            raise _read_only(path.parent, name)
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "xb"):
            pass  # an empty file: SQLite makes it a database
    except FileExistsError:
        pass  # another process made it just now
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise _read_only(path.parent, name) from None
        raise EmmyError(f"store {name}: cannot create {path}: {e.strerror}") from None


def _read_only(directory: Path, name: str) -> EmmyError:
    return EmmyError(f"store {name}: the directory {directory} is read-only; nothing was written",
                     hint="set EMMY_HOME to a writable directory, or give --storage URL")


def _storage(url: str):
    import optuna

    kwargs: dict = {}
    if url.startswith("sqlite:"):
        kwargs = {"connect_args": {"timeout": 120}}  # many workers wait for the file's lock
    elif url.startswith("postgresql"):
        kwargs = {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # heartbeats are "experimental" in Optuna
        try:
            return _retrying(lambda: optuna.storages.RDBStorage(
                url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S
            ))
        except RuntimeError as e:  # Optuna's own table schema is newer (or older) than this Optuna
            raise EmmyError(f"store {display_url(url)}: {first_line(e)}") from None
        except ImportError as e:
            raise EmmyError(f"store {display_url(url)}: its database driver is not installed ({first_line(e)})") from None


def _retrying(make, attempts: int = 5):
    """`make()`, again where another process creating the same new store at the same moment
    made it fail (Optuna's table setup is not safe against a concurrent one: a duplicate
    version row, a table created twice)."""
    import time

    import sqlalchemy.exc

    for attempt in range(attempts):
        try:
            return make()
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.OperationalError) as e:
            racing = not isinstance(e, sqlalchemy.exc.OperationalError) or "already exists" in str(e)
            if attempt == attempts - 1 or not racing:
                raise
            time.sleep(0.2 * (attempt + 1))


def _check_schema(storage, name: str, create: bool) -> None:
    import optuna

    try:
        sid = storage.get_study_id_from_name(META_STUDY)
    except KeyError:
        if not create:
            return
        try:
            sid = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], META_STUDY)
        except optuna.exceptions.DuplicatedStudyError:
            sid = storage.get_study_id_from_name(META_STUDY)
        if "schema" not in storage.get_study_user_attrs(sid):
            storage.set_study_user_attr(sid, "schema", SCHEMA)
    schema = storage.get_study_user_attrs(sid).get("schema", SCHEMA)
    if not isinstance(schema, int) or schema > SCHEMA:
        raise EmmyError(
            f"store {name} was written by a newer Emmy (store schema {schema}; this Emmy reads "
            f"schema {SCHEMA} and older); it was left as it is",
            hint="upgrade Emmy, or give another --storage",
        )


__all__ = [
    "BEST_ATTR", "DESCRIPTION_ATTR", "KERNEL_ATTR", "KEY_ATTR", "META_STUDY", "SPACE_ATTR", "Store",
    "best_record", "default_url", "display_url", "open_store", "sqlite_path", "store_errors",
    "store_exists",
]
