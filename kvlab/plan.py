"""The plan step of a sweep, between validation and execution: make what the runs need on this machine
(kvlab's tiny model), then validate every run. Validation itself (kvlab.spec) writes nothing."""

from __future__ import annotations

from pathlib import Path

from kvlab import tinymodel
from kvlab.spec import ExperimentSpec


def make_local_models(spec: ExperimentSpec) -> list[Path]:
    """Generate kvlab's tiny model when an engine of ``spec`` uses it (deterministic; a current copy is
    reused); returns the models made or checked."""
    tiny = tinymodel.DEFAULT_PATH.resolve()
    if any(Path(e.model_arg).resolve() == tiny for e in spec.engines.values()):
        return [tinymodel.ensure_tiny_model()]
    return []


def load(path: str | Path) -> ExperimentSpec:
    """An experiment ready to sweep: its fields validated, its local models made, then every run validated
    (SpecError naming file, field and value), so a fresh clone sweeps without a separate step."""
    spec = ExperimentSpec.read(path)
    make_local_models(spec)
    spec.check_runs(Path(path))
    return spec
