"""The `kvlab` command: build reports, run experiments, query the model."""

# Each command imports the stack it runs inside its function, so that `kvlab --help` and every command load only what
# they use: the report stack (papermill, nbconvert, matplotlib) costs several seconds of CPU that `kvlab sweep` and
# `kvlab --help` should not pay, and the engine adapters (pydantic, aiohttp, psutil, NVML) cost `kvlab --help` more
# than the rest of it (issue 57: 1.05-1.19 s before, most of it kvlab.engines). tests/test_cli.py holds `import
# kvlab.cli` to loading none of them. What each stack costs is measured in docs/performance.md ("The command's
# start-up").

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from kvlab.paths import DATA_DIR, NOTEBOOKS_DIR, REPORTS_DIR, ROOT
from kvlab.units import count

#: `kvlab sweep`'s exit status when it ran and any run failed (each failure is recorded and shown in the reports):
#: 0 is a sweep whose runs all succeeded, 1 a sweep that could not go on, 2 a refused experiment file or preflight.
EXIT_RUNS_FAILED = 3


class _Command(TyperCommand):
    """A command whose help shows what each value is (its metavar: FILE, N, NAME=VALUE), not a Python type
    (`<list[str]>`, `<bool>`): a flag shows none, an argument its metavar alone. Its text flows in paragraphs (the
    docstring's own line breaks are not kept)."""

    def format_help(self, ctx, formatter) -> None:
        _readable_types(self.get_params(ctx))
        self.help = _paragraphs(self.help)
        super().format_help(ctx, formatter)


class _Group(TyperGroup):
    """The `kvlab` group: its help as :class:`_Command`'s, its commands' summaries in flowing text."""

    def format_help(self, ctx, formatter) -> None:
        _readable_types(self.get_params(ctx))
        for command in self.commands.values():
            command.help = _paragraphs(command.help)
        super().format_help(ctx, formatter)


def _paragraphs(text: str | None) -> str | None:
    """``text`` with each paragraph on one line (paragraphs stay apart): the help's width wraps it, not the source's."""
    if not text:
        return text
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


def _readable_types(params) -> None:
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""  # --dry-run, --help: no value to describe
        elif isinstance(param, TyperArgument) and param.metavar is not None:
            param.display_type_rich = lambda ctx: None  # the metavar in the name column says it


app = typer.Typer(
    cls=_Group,
    help=__doc__,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_show_locals=False,
)
console = Console(stderr=True, soft_wrap=True)  # long lines stay whole in logs


def _version() -> str:
    """kvlab's version as its installed package metadata says (the source's own where it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version  # only `--version` reads the metadata

    try:
        return version("kvlab")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree that was never installed
        from kvlab import __version__  # (the same question, where no metadata answers it)

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kvlab {_version()}")
        raise typer.Exit()


def _main(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option("--version", help="print kvlab's version and exit", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """The `kvlab` command: build reports, run experiments, query the model."""
    if ctx.invoked_subcommand is None:  # bare `kvlab`: the help, and success (not click's usage error, status 2)
        text = ctx.get_help()  # rich prints it itself and returns ""
        if text:
            typer.echo(text)
        raise typer.Exit()


app.callback(invoke_without_command=True)(_main)  # the group's own options, and what a bare `kvlab` does


class _ModelCommand(_Command):
    """`kvlab model`: its help names the engine families, read from the adapters when the help is shown."""

    def format_help(self, ctx, formatter) -> None:
        from kvlab.engines import FAMILIES  # the adapters (pydantic, aiohttp, NVML): for this page only, not `--help`

        for param in self.get_params(ctx):
            if param.name == "engine":
                param.help = f"{' or '.join(FAMILIES)} (default: compare both)"
        super().format_help(ctx, formatter)


def _progress():
    """The progress bar of every long command: description, bar, done/total, elapsed time, time left."""
    # rich.progress: for the long commands only (see the top)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    )


def _parse_params(values: list[str]) -> dict:
    """`-p name=value` pairs; values are read as YAML literals (numbers, lists, booleans, strings)."""
    import yaml  # (only where a command reads parameters: see the top)

    out = {}
    for v in values:
        if "=" not in v:
            raise typer.BadParameter(f"{v!r} is not name=value", param_hint="--param")
        k, raw = v.split("=", 1)
        try:
            out[k.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise typer.BadParameter(f"{v!r}: the value is not a YAML literal ({exc})", param_hint="--param") from None
    return out


@app.command(cls=_Command, context_settings={"allow_extra_args": True})
def report(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(metavar="DIR", help="folder for executed notebooks and HTML")] = REPORTS_DIR,
    only: Annotated[list[str], typer.Option(metavar="PREFIX", help="notebook name prefix, e.g. 01 (repeatable)")] = [],  # noqa: B006
    param: Annotated[
        list[str], typer.Option("--param", "-p", metavar="NAME=VALUE", help="notebook parameter (repeatable)")
    ] = [],  # noqa: B006
    workers: Annotated[int, typer.Option(metavar="N", help="notebooks executed at once (0 = one per core)")] = 0,
) -> None:
    """Execute every notebook with papermill into OUT, export HTML, and write OUT/index.html. A run with parameters
    other than the defaults writes its own files (their names carry the parameters), never over the default report."""
    if ctx.args:  # papermill's form, `-p name value`, leaves the value over
        given = " ".join(ctx.args)
        console.print(
            f"[red]unexpected {given!r}[/red]: kvlab takes `-p name=value` (papermill's `-p name value` form: write "
            f"`-p {param[-1] if param else 'name'}={ctx.args[0]}`)"
        )
        raise typer.Exit(2)
    params = _parse_params(param)  # a bad -p is refused before the report stack loads
    from kvlab import reports  # this command's own stack (see the top)

    paths = reports.notebooks(only or None)
    try:
        reports.checked_parameters(paths, params)
    except reports.ParameterError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    with _progress() as progress:
        task = progress.add_task("executing notebooks", total=len(paths))

        def done(r):
            progress.console.print(f"  {r.notebook}: {count(r.figures, 'figure')}, {r.seconds:.1f} s")
            progress.advance(task)

        try:
            built = reports.build(out, only or None, params, workers or None, progress=done)
        except RuntimeError as exc:
            console.print(f"[red]{exc}[/red]")
            raise typer.Exit(1) from None
    console.print(f"[green]{count(len(built), 'report')}[/green] → {out / 'index.html'}")
    listed = out / reports.QUARANTINED_JSON
    if built and listed.is_file() and (found := json.loads(listed.read_text(encoding="utf-8"))):
        console.print(
            f"[yellow]{count(len(found), 'stored run folder or manifest', 'stored run folders or manifests')} not "
            f"read[/yellow] (unreadable, or a copy of another run folder): listed on the index with why, and in {escape(str(listed))}"
        )


#: `kvlab sweep`'s options for a Ray cluster, named here so that the command's signature stays readable.
_RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        help="run each server group as a task on a Ray cluster: auto (join this host's cluster), local (start one "
        "here), ray://host:port or host:port; results still go to DATA_DIR (needs the cluster extra)",
    ),
]
_RayResource = Annotated[
    str | None,
    typer.Option(
        metavar="NAME",
        help="with --ray: custom Ray resource a CPU experiment's server group asks one unit of (default: 1 CPU)",
    ),
]
_RayInsecure = Annotated[
    bool,
    typer.Option(
        "--ray-insecure",
        help="with --ray: use a Ray cluster that runs without authentication (refused otherwise: anyone who reaches "
        "its ports can run code on its nodes), and leave --ray local's authentication to RAY_AUTH_MODE",
    ),
]


@app.command(cls=_Command)
def sweep(
    experiments: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE.yaml", help="experiment YAML file(s), e.g. data/experiments/cpu_long_context.yaml"
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the exact commands and runs; launch nothing")
    ] = False,
    fresh: Annotated[bool, typer.Option(help="re-run finished runs instead of reusing them")] = False,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="run each experiment's quick form (its `quick:` points and repeats; a subset of the full study)",
        ),
    ] = False,
    data_dir: Annotated[
        Path, typer.Option(metavar="DIR", help="data folder; results go to DIR/runs/<experiment>")
    ] = DATA_DIR,
    ray: _RayAddress = None,
    ray_resource: _RayResource = None,
    ray_insecure: _RayInsecure = False,
    sequential_starts: Annotated[
        bool,
        typer.Option(
            "--sequential-starts",
            help="start each server only when the previous group is done (default: on CPU, with explicit KV budgets, "
            "the next group's server starts beside the current one's and is paused while it is measured)",
        ),
    ] = False,
) -> None:
    """Run experiments for real: every unfinished run, resumable, results under data/runs/.

    Every file is validated before anything launches (exit status 2 when one is invalid). Exit status 3 when the
    sweep ran and any run failed (the count is printed; each failure is recorded and shown in the reports), 1 when
    the sweep could not go on.
    """
    specs = _sweep_specs(experiments, quick, launchers=not dry_run and ray is None)
    if dry_run:
        _print_dry_run(specs, overlap_starts=not sequential_starts)
        return
    if ray is None:  # on a Ray cluster the engines start on its nodes: what this host has says nothing of theirs
        _preflight(list(zip(experiments, specs)), data_dir)
    else:
        _connect(ray, ray_insecure)
    res = _sweep(
        specs, data_dir, fresh, ray, ray_resource, overlap_starts=not sequential_starts, ray_insecure=ray_insecure
    )
    if res.failed:  # failed runs are results (the memory study counts them), kept; a script still learns of them
        console.print(
            f"[yellow]{count(res.failed, 'run')} failed[/yellow]: each is recorded with its cause "
            f"(data/runs/<experiment>/<run>/attempts.parquet) and shown in the reports; exit status "
            f"{EXIT_RUNS_FAILED}"
        )
        raise typer.Exit(EXIT_RUNS_FAILED)


def _sweep_specs(experiments: list[Path], quick: bool, launchers: bool) -> list:
    """Each experiment file read and validated (its quick form with ``quick``), with the environment its runs read
    (``launchers``: the engines' programs too); exit 2 on the first invalid one, or on two that share a name."""
    from kvlab import plan  # this command's own stack (see the top)
    from kvlab.experiment import SpecError  # (the same stack: plan imports spec)

    specs = []
    for experiment in experiments:
        try:
            spec = plan.load(experiment)
            spec = spec.quick_form() if quick else spec
            # the API keys its runs read, and (a sweep that launches here) the engines' programs: here, or refused now
            spec.check_environment(experiment, launchers=launchers)
            specs.append(spec)
        except SpecError as exc:
            console.print(f"[red]invalid experiment[/red]\n{escape(str(exc))}")  # "[engine=…]" is text, not markup
            raise typer.Exit(2) from None
    first: dict[str, Path] = {}
    for experiment, spec in zip(experiments, specs):
        if spec.name in first:  # their runs would share one folder (kvlab.campaign refuses it too)
            console.print(
                f"[red]invalid experiment[/red]\n{escape(str(experiment))}: name: {spec.name!r} is also the "
                f"name of {escape(str(first[spec.name]))}: one sweep takes each experiment once"
            )
            raise typer.Exit(2)
        first[spec.name] = experiment
    return specs


def _print_dry_run(specs: list, overlap_starts: bool) -> None:
    """`kvlab sweep --dry-run`: the exact commands and runs, and for a GPU plan its estimate in GPU-minutes."""
    from kvlab import plan  # this command's own stack (see the top)

    typer.echo(plan.dry_run_text(specs, overlap_starts=overlap_starts))
    if any(not s.device.on_cpu for s in specs):
        from kvlab.perfmodel.report import gpu_minutes_line  # a GPU plan's estimate (see the top)

        for line in filter(None, (gpu_minutes_line(s) for s in specs)):
            typer.echo(line)


def _connect(ray: str, ray_insecure: bool) -> None:
    """Join (or start) the Ray cluster ``ray`` names; exit 1 where it cannot be reached or is refused."""
    from kvlab import cluster  # --ray's own stack (see the top)

    try:
        cluster.connect(ray, ray_insecure)
    except cluster.ClusterError as exc:
        console.print(f"[red]cannot sweep[/red]: {escape(str(exc))}")
        raise typer.Exit(1) from None


@app.command(cls=_Command)
def check(
    experiments: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE.yaml", help="experiment YAML file(s), e.g. data/experiments/b300_long_context.yaml"
        ),
    ],
    quick: Annotated[bool, typer.Option("--quick", help="check each experiment's quick form")] = False,
    data_dir: Annotated[Path, typer.Option(metavar="DIR", help="data folder the sweep would write to")] = DATA_DIR,
) -> None:
    """The preflight `kvlab sweep` runs first: this host's GPUs (NVML), each engine's environment and release, the
    models, fixed ports and disk, before any engine starts. Exit status 2 with the file, field and fix of each problem."""
    from kvlab import plan  # the sweep's validation stack (see the top)
    from kvlab.experiment import SpecError  # (the same stack: plan imports spec)

    pairs = []
    for experiment in experiments:
        try:
            spec = plan.load(experiment)
        except SpecError as exc:
            console.print(f"[red]invalid experiment[/red]\n{escape(str(exc))}")
            raise typer.Exit(2) from None
        pairs.append((experiment, spec.quick_form() if quick else spec))
    _preflight(pairs, data_dir, verbose=True)


def _preflight(pairs, data_dir: Path, verbose: bool = False) -> None:
    """Run kvlab.preflight on each (path, spec); print what it found (``verbose``) and every problem; exit 2 on any."""
    from kvlab import preflight  # campaign's stack (polars): only for check and sweep (see the top)

    bad = 0
    for path, spec in pairs:
        report = preflight.check(path, spec, data_dir)
        if verbose or not report.ok:
            console.print(
                f"{'[green]ready[/green]' if report.ok else '[red]not ready[/red]'} {escape(str(path))}"
                + "".join(f"\n  {escape(line)}" for line in (report.found if verbose else []))
            )
        for problem in report.problems:
            console.print(f"  [red]✗[/red] {escape(str(problem))}")
        bad += len(report.problems)
    if bad:
        console.print(f"[red]{count(bad, 'problem')}[/red]: nothing was launched")
        raise typer.Exit(2)


def _sweep(
    specs,
    data_dir: Path,
    fresh: bool,
    ray: str | None = None,
    ray_resource: str | None = None,
    overlap_starts: bool = True,
    ray_insecure: bool = False,
):
    """One sweep over every experiment given: runs that need the same server share one start (``ray``: one
    Ray task per server configuration, see kvlab.cluster)."""
    from kvlab import plan, runner  # this command's own stack (see the top)
    from kvlab.campaign import Campaign, SweepError, UnsafeDataFolder  # (the same stack: runner imports campaign)

    campaign = Campaign(specs, data_dir, fresh)
    try:
        campaign.prepare()
    except SweepError as exc:
        console.print(f"[red]cannot sweep[/red]: {exc}")
        raise typer.Exit(2 if isinstance(exc, UnsafeDataFolder) else 1) from None
    for q in (q for found in campaign.quarantined.values() for q in found):
        console.print(f"[yellow]warning[/yellow]: {escape(_set_aside_text(q))}")
    todo, _ = campaign.pending()
    groups = plan.by_server(todo)
    shared = sum(len({r.experiment for r in group}) > 1 for _, group in groups)
    for spec in specs:
        t, s = campaign.pending_in(spec)
        console.print(f"{spec.name}: {count(len(t), 'run')} to do, {count(s, 'finished run')} reused")
    if todo:
        console.print(
            f"{count(len(groups), 'server configuration')} for {count(len(todo), 'run')}"
            + (f"; {shared} shared by runs of different experiments" if shared else "")
        )
    many = len(specs) > 1
    with _progress() as progress:
        task = progress.add_task("sweep " + (f"{len(specs)} experiments" if many else specs[0].name), total=len(todo))

        planned = {r.key for r in todo}

        def on_run(run, status):
            colour = {"ok": "green", "not climbed": "yellow"}.get(status, "red")
            w = run.workload
            varies = " ".join(_point_text(axis, v) for axis, v in run.point.items() if axis != "engine")
            if run.key not in planned:  # a load search's probe: a run the search adds as it goes, at its own level
                progress.update(task, total=progress.tasks[task].total + 1)
                level = f"{w.load.concurrency:g} in flight" if w.load.concurrency else f"{w.load.rate_rps:g} req/s"
                varies += f" → probe at {level}"
            where = f"{run.experiment} " if many else ""
            progress.console.print(
                f"  [{colour}]{status:6}[/{colour}] {where}{run.key} {run.engine_label} {varies} "
                f"({w.prompt_len}+{w.output_tokens} tok × {w.n_requests}) repeat={run.repeat}"
            )
            progress.advance(task)

        campaign.on_run = on_run
        if ray is None:
            try:
                res = campaign.execute(runner.LocalExecutor(overlap_starts=overlap_starts))
            except SweepError as exc:  # the disk filled up: one message naming the run and the free space
                console.print(f"[red]sweep stopped[/red]: {escape(str(exc))}")
                raise typer.Exit(1) from None
        else:
            from kvlab import cluster  # --ray's own stack (see the top)

            try:
                res = campaign.execute(cluster.RayExecutor(ray, ray_resource, ray_insecure))
            except (cluster.ClusterError, SweepError) as exc:  # SweepError: a disk filled up (here or on a node)
                console.print(f"[red]cluster sweep stopped[/red]: {escape(str(exc))}")
                raise typer.Exit(1) from None
    _print_results(res, data_dir)
    return res


def _set_aside_text(q) -> str:
    """One run folder a sweep did not reuse (kvlab.store.SetAside), in words: a copy of another folder's run names
    both folders and the one kept; an unreadable one says why and that its run is measured again."""
    from kvlab.markup import visible_controls  # a folder name's bidirectional controls would reorder the line

    if q.kept is not None:
        text = f"duplicate run folder: {q.path} {q.reason}; moved to {q.moved_to} (the reason beside it)"
    else:
        text = (
            f"run folder {q.path} cannot be read, so it is not reused: {q.reason}; moved to {q.moved_to} (the "
            "reason beside it) and measured again"
        )
    return visible_controls(text)


def _print_results(res, data_dir: Path) -> None:
    """What a sweep did: per experiment its runs ok, failed and reused (and set aside, and rungs not climbed), then
    its server starts, attempts and wall time."""
    for name, r in res.experiments.items():
        unread = sum(q.kept is None for q in r.quarantined)
        copies = len(r.quarantined) - unread
        quarantined = ", ".join(
            part
            for part in (
                f"{count(unread, 'unreadable run folder')} not reused but measured again" if unread else "",
                f"{count(copies, 'duplicate run folder')} (a copy of another's run) not read" if copies else "",
            )
            if part
        )
        if quarantined:
            quarantined = f"; {quarantined}: set aside in {data_dir / 'runs' / name / 'quarantined'}"
        aside = (
            (
                f"; {count(r.superseded, 'run')} of an earlier version of the experiment set aside in "
                f"{data_dir / 'runs' / name / 'superseded'}"
            )
            if r.superseded
            else ""
        )
        climb = (
            f", {count(r.not_climbed, 'rung')} of a load ladder not climbed (a lower rung was past saturation or its goodput fell)"
            if r.not_climbed
            else ""
        )
        console.print(
            f"{name}: {r.ok} ok, {r.failed} failed, {r.skipped} reused{climb} → {data_dir / 'runs' / name}{aside}"
            f"{quarantined}"
        )
    console.print(f"{count(res.server_starts, 'server start')}, {count(res.attempts, 'attempt')}, {res.wall_s:.0f} s")


def _point_text(axis: str, value) -> str:
    """What a matrix axis chose for one run, as `field=value` (a linked axis: each of its fields)."""
    pairs = value.items() if isinstance(value, dict) else [(axis, value)]
    return " ".join(
        f"{path.rsplit('.', 1)[-1]}={v:g}" if isinstance(v, float) else f"{path.rsplit('.', 1)[-1]}={v}"
        for path, v in pairs
    )


@app.command(cls=_ModelCommand)
def model(
    target: Annotated[
        str | None, typer.Argument(metavar="FILE.yaml", help="experiment YAML to predict (optional)")
    ] = None,
    gpu: Annotated[str, typer.Option(metavar="NAME", help="GPU from data/catalog/gpus.csv")] = "B300",
    model_name: Annotated[
        str, typer.Option("--model", metavar="NAME", help="model from data/catalog/models.csv")
    ] = "Kimi-K3",
    engine: Annotated[
        str | None, typer.Option(metavar="FAMILY", help="engine family (default: compare both)")
    ] = None,  # the families are named when the help is shown (_ModelCommand): the adapters load only then
    tp: Annotated[int, typer.Option(metavar="N", help="tensor-parallel size")] = 8,
    dcp: Annotated[int | None, typer.Option(metavar="N", help="decode-context-parallel size")] = None,
    context: Annotated[list[int], typer.Option(metavar="TOKENS", help="context tokens (repeatable)")] = [],  # noqa: B006
    batch_size: Annotated[int | None, typer.Option(metavar="N", help="requests per batch")] = None,
    output_tokens: Annotated[int | None, typer.Option(metavar="N", help="output tokens per request")] = None,
    mem_util: Annotated[float, typer.Option(metavar="FRACTION", help="memory-utilisation setting")] = 0.92,
    tpot_ms: Annotated[
        float | None,
        typer.Option(metavar="MS", help="TPOT target: print capacity-limited throughput per configuration first"),
    ] = None,
) -> None:
    """Print the physical model's predictions (modelled, calibrated on the published table)."""
    from kvlab.perfmodel.report import model_command  # this command's own stack (see the top)
    from kvlab.experiment import SpecError  # (the same stack: the report reads experiments with kvlab.experiment)

    try:
        text = model_command(
            target,
            gpu=gpu,
            model=model_name,
            engine=engine,
            tp=tp,
            dcp=dcp,
            context_tokens=context or None,
            batch_size=batch_size,
            output_tokens=output_tokens,
            mem_util=mem_util,
            tpot_ms=tpot_ms,
        )
    except SpecError as exc:
        console.print(f"[red]invalid experiment[/red]\n{escape(str(exc))}")
        raise typer.Exit(2) from None
    except (KeyError, ValueError) as exc:  # a GPU or model not in the catalog, a setting the model cannot take
        console.print(f"[red]invalid input[/red]: {escape(str(exc.args[0] if exc.args else exc))}")
        raise typer.Exit(2) from None
    typer.echo(text)


@app.command("make-model", cls=_Command)
def make_model(
    out: Annotated[Path | None, typer.Option(metavar="DIR", help="folder (default data/models/tiny-llama)")] = None,
) -> None:
    """Generate kvlab's tiny local model (deterministic; nothing is downloaded)."""
    from kvlab.tinymodel import ensure_tiny_model  # this command's own stack (see the top)

    typer.echo(ensure_tiny_model(out))


#: JupyterLab's working folder (`kvlab lab`, `make lab`): copies of the notebooks, made once, and a link to the reports.
#: Git ignores it (its own .gitignore): what a person saves there is theirs, and no tracked template changes.
LAB_DIR = ROOT / "lab"
#: In the working folder: each copied template's SHA-256 when it was copied (hidden: Jupyter does not list it).
_LAB_RECORD = ".kvlab-templates.json"


def prepare_lab(folder: Path = LAB_DIR, notebooks: Path = NOTEBOOKS_DIR, reports: Path = REPORTS_DIR) -> list[str]:
    """Make ``folder`` JupyterLab's working folder and return what it did, one line each: every notebook of
    ``notebooks`` copied in where the folder has no copy yet (a copy is never overwritten: a template changed since
    its copy was made is named, with how to take it), and ``reports`` reachable from it as ``reports/`` (a link)."""
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# kvlab lab's working folder: copies of notebooks/ and what you save; not tracked\n*\n")
    record_path = folder / _LAB_RECORD
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        record = {}
    notes = []
    for template in sorted(notebooks.glob("*.ipynb")):
        digest = hashlib.sha256(template.read_bytes()).hexdigest()
        copy = folder / template.name
        if not copy.exists():
            shutil.copyfile(template, copy)
            record[template.name] = digest
            notes.append(f"copied {template.name} into {folder}")
        elif record.get(template.name) != digest:
            notes.append(
                f"{copy} is your copy: {template} has changed since it was made (delete the copy and run kvlab lab "
                "again to take the new template)"
            )
    record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    link = folder / "reports"
    if not link.exists() and not link.is_symlink():
        reports.mkdir(parents=True, exist_ok=True)  # reachable before the first `make report` too
        try:
            link.symlink_to(os.path.relpath(reports, folder), target_is_directory=True)
        except OSError as exc:  # a file system without links: say where the reports are
            notes.append(f"the reports are in {reports} (no link from {folder}: {exc.strerror or exc})")
    return notes


def lab_argv(port: int = 8888, open_browser: bool = True, root: Path = LAB_DIR) -> list[str]:
    """JupyterLab on the working folder ``root`` (:func:`prepare_lab`), bound to this machine only and behind
    Jupyter's token (JUPYTER_TOKEN, else one Jupyter makes and prints). As root (containers, these build machines)
    Jupyter refuses to start without --allow-root; kvlab passes it only then."""
    argv = [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
    ]
    if not open_browser:
        argv.append("--no-browser")
    if os.geteuid() == 0:
        argv.append("--allow-root")
    return argv


@app.command(cls=_Command)
def lab(
    port: Annotated[int, typer.Option(metavar="PORT", help="port on 127.0.0.1 (make lab PORT=…)")] = 8888,
    browser: Annotated[bool, typer.Option(help="open a browser tab")] = True,
    folder: Annotated[
        Path,
        typer.Option(
            "--dir",
            metavar="DIR",
            help="working folder: copies of the notebooks (made once, never overwritten) and reports/",
        ),
    ] = LAB_DIR,
) -> None:
    """Open JupyterLab on a working folder: copies of the notebooks, so that saving never changes a template in
    notebooks/, and reports/ beside them (localhost only, with Jupyter's token; works as root too)."""
    for note in prepare_lab(folder, NOTEBOOKS_DIR, REPORTS_DIR):
        console.print(escape(note))
    argv = lab_argv(port, browser, folder)
    os.execv(argv[0], argv)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
