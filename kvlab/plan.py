"""The plan step of a sweep, between validation and execution: make what the runs need on this machine
(kvlab's tiny model), then validate every run, and group the runs by the server they need. Validation
itself (kvlab.spec) writes nothing."""

from __future__ import annotations

from pathlib import Path

from kvlab import tinymodel
from kvlab.spec import ExperimentSpec, RunSpec


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


def by_server(runs: list[RunSpec]) -> list[tuple[str, list[RunSpec]]]:
    """Runs grouped by identical server configuration (``server_key``), in first-seen order: each group
    is one server start."""
    groups: dict[str, list[RunSpec]] = {}
    for r in runs:
        groups.setdefault(r.server_key, []).append(r)
    return list(groups.items())
