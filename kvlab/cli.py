"""The `kvlab` command: build reports, run experiments, query the model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from kvlab.paths import REPORTS_DIR

app = typer.Typer(help=__doc__, no_args_is_help=True, pretty_exceptions_show_locals=False)
console = Console(stderr=True)


def _parse_params(values: list[str]) -> dict:
    """`-p name=value` pairs; values are read as YAML literals (numbers, lists, booleans, strings)."""
    import yaml

    out = {}
    for v in values:
        if "=" not in v:
            raise typer.BadParameter(f"{v!r} is not name=value", param_hint="--param")
        k, raw = v.split("=", 1)
        out[k.strip()] = yaml.safe_load(raw)
    return out


@app.command()
def report(
    out: Annotated[Path, typer.Option(help="folder for executed notebooks and HTML")] = REPORTS_DIR,
    only: Annotated[list[str], typer.Option(help="notebook name prefix, e.g. 01 (repeatable)")] = [],  # noqa: B006
    param: Annotated[list[str], typer.Option("--param", "-p", help="notebook parameter name=value (repeatable)")] = [],  # noqa: B006
    workers: Annotated[int, typer.Option(help="notebooks executed at once (0 = one per core)")] = 0,
) -> None:
    """Execute every notebook with papermill into OUT, export HTML, and write OUT/index.html."""
    from kvlab import reports

    paths = reports.notebooks(only or None)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("executing notebooks", total=len(paths))

        def done(r):
            progress.console.print(f"  {r.notebook}: {r.figures} figure(s), {r.seconds:.1f} s")
            progress.advance(task)

        try:
            built = reports.build(out, only or None, _parse_params(param), workers or None, progress=done)
        except RuntimeError as exc:
            console.print(f"[red]{exc}[/red]")
            raise typer.Exit(1) from None
    console.print(f"[green]{len(built)} report(s)[/green] → {out / 'index.html'}")


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
