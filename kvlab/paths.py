"""Every path kvlab uses, built from one project-root constant, and how a finished folder is put in place."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

#: The repository root (the folder holding ``kvlab/``, ``data/``, ``notebooks/``).
ROOT = Path(os.environ.get("KVLAB_ROOT", Path(__file__).resolve().parent.parent))
DATA_DIR = ROOT / "data"
CATALOG_DIR = DATA_DIR / "catalog"  # GPU and model catalogs for the physical model
EXPERIMENTS_DIR = DATA_DIR / "experiments"  # shipped experiment specs (YAML)
MODELS_DIR = DATA_DIR / "models"  # locally generated tiny models (ignored by git)
NOTEBOOKS_DIR = ROOT / "notebooks"
REPORTS_DIR = ROOT / "reports"
ENGINES_DIR = ROOT / ".engines"  # per-engine virtual environments made by `make`


def publish_dir(tmp: Path, final: Path) -> None:
    """Move a fully written folder into place by rename, replacing an older one: readers see old or new."""
    if final.exists():
        old = final.parent / f".{final.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(tmp, final)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` by rename from a new file of a random name in the same folder (mode 0600,
    created with O_EXCL by mkstemp): readers see old or new, and no predictable temporary path exists that a
    link planted beforehand could redirect. A link at ``path`` itself is replaced, never written through."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
