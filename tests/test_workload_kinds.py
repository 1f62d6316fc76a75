"""The workload-kind registry: every kind module is complete and read by spec, schema, runner and guide;
a new kind is one new module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest

from kvlab import guide, plan, workloads
from kvlab.schema import RUNS
from kvlab.experiment import ExperimentSpec, WorkloadSpec, workload_spec
from kvlab.workloads import KINDS, WorkloadArgs, shared_tokens

REPO = Path(__file__).resolve().parents[1]

#: What each shipped kind's example shares across its requests (RUNS.shared_prefix_tokens): shared_prefix
#: half of its 60-token prompts, multi_turn its 32-token document, reasoning unknown (server-tokenised).
EXAMPLE_SHARED = {
    "classification": 0,
    "concurrency": 0,
    "fixed_batch": 0,
    "multi_turn": 32,
    "reasoning": None,
    "shared_prefix": 30,
    "trace": 0,  # the first record has nothing earlier to reuse
}


def test_the_shipped_kinds_are_the_package_modules():
    assert list(KINDS) == [
        "classification",
        "concurrency",
        "fixed_batch",
        "multi_turn",
        "reasoning",
        "shared_prefix",
        "trace",
    ]
    assert KINDS == workloads.discover()


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_has_args_generator_shared_count_description(kind):
    args = KINDS[kind]
    assert issubclass(args, WorkloadArgs) and args.__module__ == f"kvlab.workloads.{kind}"
    assert args.description and "\n" not in args.description
    w = workload_spec(**args.example)
    assert type(w) is args and w.kind == kind
    prompts = w.generate(512, seed=0)
    assert len(prompts) == w.n_requests and {p.max_tokens for p in prompts} == {w.output_tokens}
    assert all(p.prompt_tokens is None or p.prompt_tokens <= w.prompt_len for p in prompts)
    assert shared_tokens(prompts) == EXAMPLE_SHARED[kind]
    assert w.generate(512, seed=0) == prompts and w.generate(512, seed=1) != prompts  # deterministic from the seed


@pytest.mark.parametrize("kind", list(KINDS))
def test_spec_schema_runner_and_guide_read_every_kind(kind):
    union = typing.get_args(WorkloadSpec)[0]  # Annotated[Union[...], discriminator]
    assert KINDS[kind] in typing.get_args(union)
    assert kind in next(c for c in RUNS.columns if c.name == "mode").allowed
    spec = ExperimentSpec.model_validate(
        {
            "name": "t",
            "hardware": "CPU",
            "device": "cpu",
            "engines": {
                "vllm": {
                    "name": "vllm",
                    "launch": ["python"],
                    "model": "meta-llama/Llama-3.1-8B-Instruct",
                    "max_model_len": 4096,
                }
            },
            "workload": KINDS[kind].example,
        }
    )
    assert guide.experiment_workload(spec).shared_fraction == spec.workload.sharing
    assert f"× {spec.workload.batch_size} {kind}" in plan.dry_run_text(spec)


def test_kind_rules_and_sharing_of_the_shipped_kinds():
    sp = workload_spec(**KINDS["shared_prefix"].example)
    mt = workload_spec(**KINDS["multi_turn"].example)
    assert (sp.sharing, sp.detail()) == (0.5, ["shared 0.5 = 30 tokens"])
    assert (mt.sharing, mt.prompt_len, mt.n_requests) == (32 / 44, 44, 4)
    assert mt.detail() == ["2 turns over a 32-token document, 4 requests"]
    assert workload_spec(**KINDS["fixed_batch"].example).sharing == 0.0
    same = workload_spec(**KINDS["fixed_batch"].example, distinct_prompts=False)
    assert shared_tokens(same.generate(512, seed=0)) == 60  # n copies of one 60-token prompt
    assert [k for k, a in KINDS.items() if a.splits_reasoning] == ["reasoning"]
    with pytest.raises(ValueError, match=r"turns applies to kind\(s\) \['multi_turn'\] only, not 'shared_prefix'"):
        workload_spec(**KINDS["shared_prefix"].example, turns=2)
    assert workload_spec(**KINDS["fixed_batch"].example, turns=None) == workload_spec(**KINDS["fixed_batch"].example)


POISSON = '''\
"""poisson: a kind written by the test that checks a new module is picked up."""

from typing import Literal

from pydantic import Field

from kvlab.workloads import fixed_batch
from kvlab.workloads.base import Prompt, WorkloadArgs


class Args(WorkloadArgs):
    description = "batch_size requests arriving at `rate` per second"
    example = {"kind": "poisson", "batch_size": 3, "context_tokens": 40, "output_tokens": 4, "rate": 2.0}

    kind: Literal["poisson"]
    rate: float | None = Field(None, gt=0, description="poisson: requests per second")

    def check(self) -> None:
        if self.rate is None:
            raise ValueError("kind 'poisson' needs rate")

    def generate(self, vocab_size: int, seed: int) -> list[Prompt]:
        return fixed_batch.prompts(self.batch_size, self.prompt_len, self.output_tokens, vocab_size, seed)
'''

PROBE = """\
import json, sys
from pathlib import Path
from kvlab import guide, plan, runner, workloads
from kvlab.schema import RUNS
from kvlab.experiment import ExperimentSpec, expand, workload_spec

exp = Path(sys.argv[1])
runs = expand(ExperimentSpec.load(exp))
out = {"kinds": list(workloads.KINDS), "runs": len(runs), "rates": sorted(r.workload.rate for r in runs),
       "prompts": [len(p.token_ids) for p in runner.prompts_for(runs[0], 512)],
       "mode_allowed": "poisson" in next(c for c in RUNS.columns if c.name == "mode").allowed,
       "dry_run": plan.dry_run_text(ExperimentSpec.load(exp)).splitlines()[-1].split(": ", 1)[1],
       "tree_sharing": guide.experiment_workload(ExperimentSpec.load(exp)).shared_fraction}
for bad in ({"kind": "poisson", "batch_size": 3, "context_tokens": 40, "output_tokens": 4},
            {"kind": "fixed_batch", "batch_size": 3, "context_tokens": 40, "output_tokens": 4, "rate": 1.0}):
    try:
        workload_spec(**bad)
    except ValueError as exc:
        out.setdefault("errors", []).append(exc.errors()[0]["msg"])
print(json.dumps(out))
"""


def test_a_new_kind_module_is_picked_up(tmp_path):
    """Adding a kind is adding one file: a copy of kvlab with one more module in kvlab/workloads/ loads,
    expands, generates, validates against the schema and feeds the guide, with no other edit."""
    shutil.copytree(REPO / "kvlab", tmp_path / "kvlab", ignore=shutil.ignore_patterns("__pycache__", "envs"))
    (tmp_path / "kvlab" / "workloads" / "poisson.py").write_text(POISSON)
    (tmp_path / "data").symlink_to(REPO / "data")  # the copy's catalog (the guide reads it)
    exp = tmp_path / "poisson.yaml"
    exp.write_text(
        json.dumps(
            {
                "name": "p",
                "hardware": "CPU",
                "device": "cpu",
                "engines": {
                    "vllm": {
                        "name": "vllm",
                        "launch": ["python"],
                        "model": "meta-llama/Llama-3.1-8B-Instruct",
                        "max_model_len": 4096,
                    }
                },
                "workload": {"kind": "poisson", "batch_size": 3, "context_tokens": 40, "output_tokens": 4, "rate": 2.0},
                "matrix": {"workload.rate": [2.0, 8.0]},
            }
        )
    )
    (tmp_path / "probe.py").write_text(textwrap.dedent(PROBE))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "probe.py"), str(exp)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["kinds"] == [
        "classification",
        "concurrency",
        "fixed_batch",
        "multi_turn",
        "poisson",
        "reasoning",
        "shared_prefix",
        "trace",
    ]
    assert (out["runs"], out["rates"], out["prompts"]) == (2, [2.0, 8.0], [36, 36, 36])
    assert out["mode_allowed"] and out["tree_sharing"] == 0.0
    assert out["dry_run"] == "40 (36+4 tokens) × 3 poisson, repeat 0"
    assert out["errors"] == [
        "Value error, kind 'poisson' needs rate",
        "Value error, rate applies to kind(s) ['poisson'] only, not 'fixed_batch'",
    ]
    assert "poisson" not in KINDS  # the copy's kind stays in the copy
