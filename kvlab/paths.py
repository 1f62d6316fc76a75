"""Every path kvlab uses, built from one project-root constant."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (the folder holding ``kvlab/``, ``data/``, ``notebooks/``).
ROOT = Path(os.environ.get("KVLAB_ROOT", Path(__file__).resolve().parent.parent))
DATA_DIR = ROOT / "data"
REFERENCE_DIR = DATA_DIR / "reference"  # published figures (inputs, never edited by code)
RUNS_DIR = DATA_DIR / "runs"  # measured runs, one folder per experiment
CATALOG_DIR = DATA_DIR / "catalog"  # GPU and model catalogs for the physical model
EXPERIMENTS_DIR = DATA_DIR / "experiments"  # shipped experiment specs (YAML)
MODELS_DIR = DATA_DIR / "models"  # locally generated tiny models (ignored by git)
NOTEBOOKS_DIR = ROOT / "notebooks"
REPORTS_DIR = ROOT / "reports"
ENGINES_DIR = ROOT / ".engines"  # per-engine virtual environments made by `make`
