"""Every path kvlab uses, built from one project-root constant, and how a finished folder is put in place."""

from __future__ import annotations

import os
import shutil
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
