"""The model's least-squares fits, kept between processes: one SQLite file, one row per fit.

Every notebook kernel is a fresh process, and the reports refit the same points under the same assumptions (report 01
alone runs about 1,600 fits). :func:`cached` answers a fit it has seen from the file and stores every fit it computes:

- **key**: sha256 over :func:`code_version` (the bytes of every ``kvlab/perfmodel/*.py``, the engine families the
  model reads, and the arithmetic underneath: Python, numpy and scipy versions, the CPU and numpy's SIMD paths, which
  move a fit's last digits, docs/testing.md) and every field of the fit's inputs (:func:`canonical`: the points with
  their catalog rows, the assumptions, the starting parameters, the free names, the kind of fit; floats written
  exactly). A changed input or a changed line of the model is another key: nothing is invalidated, old rows are
  never read again.
- **value**: JSON of :meth:`Params.as_dict` (floats round-trip exactly through JSON; no pickle), so a hit is the very
  result a refit gives.
- **where**: ``$KVLAB_FIT_CACHE`` (a file; ``off`` turns the cache off), else ``$XDG_CACHE_HOME/kvlab/fits.sqlite``
  (``~/.cache`` without it). Its folder is created mode 0700; a folder that is a link or is not this user's alone is
  not used (another user could plant fits). Clearing it: delete the file.
- **faults**: a file that is not a database or cannot be opened, or a row that does not parse, is a miss: the fit is
  computed as if there were no cache (a warning names an unusable file or folder, except a default folder that cannot
  be made: no writable home, no cache). Two processes may write at once (WAL, a busy timeout).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import sqlite3
import sys
import threading
import warnings
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
import scipy
from pydantic import BaseModel

from kvlab.host import cpu_model
from kvlab.paths import private_folder_problem
from kvlab.engines.registry import FAMILY_OF
from kvlab.perfmodel.roofline import Params

ENV = "KVLAB_FIT_CACHE"
OFF = "off"
FILE_NAME = "fits.sqlite"
#: How long a write waits for another process's (seconds): `make test` and `make report` run kernels side by side.
BUSY_TIMEOUT_S = 30.0
#: Hits and misses of this process (the tests read them).
counts = {"hit": 0, "miss": 0}

_HERE = Path(__file__).resolve().parent
_lock = threading.Lock()
_open: dict[str, object] = {}  # pid, path and connection of this process's store (None: unusable)
_rows: dict[int, tuple[BaseModel, str]] = {}  # id -> (catalog row, its canonical text)


def default_location() -> Path:
    """``$XDG_CACHE_HOME/kvlab/fits.sqlite``, or ``~/.cache/kvlab/fits.sqlite`` (XDG: a relative value is ignored)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / "kvlab" / FILE_NAME


def location() -> Path | None:
    """The cache file: ``$KVLAB_FIT_CACHE``, :func:`default_location` when unset, None when it is ``off``."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() == OFF:
        return None
    return Path(value).expanduser() if value else default_location()


def _simd_paths() -> str:
    """numpy's dispatched SIMD paths this process uses (``NPY_DISABLE_CPU_FEATURES`` switches some off) and
    OpenBLAS's forced kernels, if any: both move a fit's last digits."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__  # private: may move

        paths = " ".join(f for f in __cpu_dispatch__ if __cpu_features__.get(f))
    except ImportError:  # another numpy layout: its version (in the key) stands for it
        paths = "?"
    return f"{paths}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}"


@lru_cache(maxsize=1)
def code_version() -> str:
    """What a fit's result depends on besides its inputs, hashed once per process: every ``kvlab/perfmodel/*.py``
    (name and bytes), the engine families, and the arithmetic underneath (Python, numpy, scipy, the CPU, numpy's SIMD
    paths and OpenBLAS's forced kernels)."""
    h = hashlib.sha256()
    for path in sorted(_HERE.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    env = (
        sorted(FAMILY_OF.items()),
        sys.version,
        platform.machine(),
        np.__version__,
        scipy.__version__,
        cpu_model(),
        _simd_paths(),
    )
    h.update(repr(env).encode())
    return h.hexdigest()


_SCALARS = frozenset({int, str, bool, type(None)})


@lru_cache(maxsize=64)
def _field_names(cls: type) -> tuple[str, ...] | None:
    """The fields a dataclass or a catalog row (pydantic) is written out by, every one; None for another type."""
    if issubclass(cls, BaseModel):
        return tuple(cls.model_fields)
    if dataclasses.is_dataclass(cls):
        return tuple(f.name for f in dataclasses.fields(cls))
    return None


def canonical(x) -> str:
    """Every field of a fit's input, written out (TypeError for a type it does not know: that fit is not cached).
    Like ``repr`` but independent of it: a dataclass or catalog row by each of its fields (``repr=False`` ones too),
    floats by their exact shortest repr (numpy's too), so equal inputs give equal text and unequal ones never do."""
    cls = type(x)
    if cls is float:
        return float.__repr__(x)
    if cls in _SCALARS:
        return repr(x)
    if cls is tuple or cls is list:
        items = ", ".join(canonical(v) for v in x)
        return f"[{items}]" if cls is list else f"({items})"
    if (seen := _rows.get(id(x))) is not None and seen[0] is x:
        return seen[1]
    names = _field_names(cls)
    if names is None:
        if isinstance(x, float):  # numpy's float64
            return float.__repr__(x)
        raise TypeError(f"no cache key for a {cls.__name__}")
    text = f"{cls.__module__}.{cls.__qualname__}({', '.join(f'{n}={canonical(getattr(x, n))}' for n in names)})"
    if issubclass(cls, BaseModel):  # a catalog row (frozen, loaded once per process): written once per object
        if len(_rows) >= 256:
            _rows.clear()
        _rows[id(x)] = (x, text)  # holding the object keeps its id from being reused
    return text


def key(*inputs) -> str:
    """sha256 of :func:`code_version` and :func:`canonical` of ``inputs``."""
    return hashlib.sha256(f"{code_version()}\n{canonical(inputs)}".encode()).hexdigest()


def _folder_refused(folder: Path) -> str | None:
    """Create ``folder`` mode 0700 (its parents as usual); why it may not hold the cache (None: it may): it must be a
    real folder of this user's that no other user can write to (kvlab.paths.private_folder_problem, the server
    state folder's rule too)."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = private_folder_problem(folder)
    except OSError as e:
        return f"folder cannot be made ({e.strerror})"
    return None if why is None else f"folder {folder} {why}"


def _unusable(path: Path, why: str) -> None:
    warnings.warn(
        f"{path}: kvlab's fit cache {why}; the model's fits are computed without it (delete the file, or "
        f"set {ENV} to another file or to '{OFF}')",
        RuntimeWarning,
        stacklevel=4,
    )


def _connect(path: Path) -> sqlite3.Connection | None:
    """The store at ``path``, created (mode 0600, never through a link) when missing; None when it cannot be used,
    with a warning (none where the default folder cannot be made: a home without a writable cache folder simply
    has no cache)."""
    if why := _folder_refused(path.parent):
        if path != default_location() or not why.startswith("folder cannot be made"):
            _unusable(path, why)
        return None
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        if os.lstat(path).st_uid != os.getuid():
            _unusable(path, "file is not this user's")
            return None
        con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=OFF")
            con.execute("CREATE TABLE IF NOT EXISTS fits (key TEXT PRIMARY KEY, params TEXT NOT NULL)")
        except sqlite3.Error:
            con.close()
            raise
        return con
    except (OSError, sqlite3.Error) as e:
        _unusable(path, f"file cannot be used ({e})")
        return None


def _store() -> sqlite3.Connection | None:
    """This process's connection to :func:`location` (reopened when the location or the process changes)."""
    path = location()
    if path is None:
        return None
    if _open.get("pid") != os.getpid() or _open.get("path") != path:
        _open.update(pid=os.getpid(), path=path, con=_connect(path))
    return _open["con"]


def _parse(text: str) -> Params | None:
    """A stored row's parameters; None unless it is exactly every field of Params, each a float."""
    try:
        values = json.loads(text)
    except (TypeError, ValueError):
        return None
    names = [f.name for f in dataclasses.fields(Params)]
    if not isinstance(values, dict) or sorted(values) != sorted(names):
        return None
    if not all(type(v) is float for v in values.values()):
        return None
    return Params(**values)


def _get(con: sqlite3.Connection, k: str) -> Params | None:
    try:
        row = con.execute("SELECT params FROM fits WHERE key = ?", (k,)).fetchone()
    except sqlite3.Error:
        return None
    return _parse(row[0]) if row else None


def _put(con: sqlite3.Connection, k: str, p: Params) -> None:
    with contextlib.suppress(sqlite3.Error):
        con.execute("INSERT OR REPLACE INTO fits (key, params) VALUES (?, ?)", (k, json.dumps(p.as_dict())))


def cached(compute: Callable[..., Params], *inputs) -> Params:
    """``compute(*inputs)``, from the store when this code has computed it for these inputs before (in any
    process); computed and stored otherwise. With the cache off or unusable, simply ``compute(*inputs)``."""
    with _lock:
        con = _store()
        try:
            k = key(*inputs) if con is not None else None
        except TypeError:  # an input it cannot write out exactly: not cached
            k = None
        if k is not None and (p := _get(con, k)) is not None:
            counts["hit"] += 1
            return p
    p = compute(*inputs)
    if k is not None:
        counts["miss"] += 1
        with _lock:
            _put(con, k, p)
    return p
