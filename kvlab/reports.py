"""Build the reports: execute each notebook with papermill, export self-contained HTML, write an index.

Templates in ``notebooks/`` are never modified: every execution writes a new notebook under
``reports/`` and its HTML beside it (code hidden for readers, figures embedded as data URIs).
"""

from __future__ import annotations

import html
import json
import re
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from kvlab.paths import NOTEBOOKS_DIR, REPORTS_DIR


#: An embedded output image (the HTML template's own CSS icons are not <img> tags).
FIGURE_RE = re.compile(r'<img[^>]*src="data:image/(?:png|jpeg|svg\+xml);base64,')


@dataclass(frozen=True)
class Report:
    notebook: str
    title: str
    summary: str
    html: Path
    seconds: float
    figures: int


def notebooks(selected: list[str] | None = None, notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """The report notebooks (``NN_name.ipynb``), optionally only those whose name starts with a selector."""
    found = sorted(p for p in notebooks_dir.glob("[0-9][0-9]_*.ipynb"))
    if selected:
        chosen = [p for p in found if any(p.stem.startswith(s) or p.name == s for s in selected)]
        unknown = [s for s in selected if not any(p.stem.startswith(s) or p.name == s for p in found)]
        if unknown:
            raise FileNotFoundError(f"no notebook matches {unknown} in {notebooks_dir} (have: {[p.name for p in found]})")
        return chosen
    return found


def describe(nb_path: Path) -> tuple[str, str]:
    """Title (the first markdown heading) and one-line summary (the paragraph after it)."""
    nb = nbformat.read(nb_path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("# "):
            lines = [ln.strip() for ln in cell.source.strip().splitlines()]
            title = lines[0].lstrip("# ").strip()
            rest = " ".join(ln for ln in lines[1:] if ln and not ln.startswith("#"))
            return title, rest.split(". ")[0].rstrip(".") + "."
    return nb_path.stem, ""


def to_html(executed: Path, out: Path) -> int:
    """Export an executed notebook to standalone HTML without code; return the number of embedded figures."""
    from nbconvert import HTMLExporter

    nb = nbformat.read(executed, as_version=4)
    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nb)
    out.write_text(body, encoding="utf-8")
    return len(FIGURE_RE.findall(body))


def _kernel_config():
    """Kernel-manager settings for executing notebooks: CurveZMQ keys for the kernel's sockets where this
    pyzmq supports them. Without keys ipykernel (7.4) warns on every start that its TCP traffic is
    unencrypted; with ``auto`` the manager provisions keys only for kernelspecs that declare support."""
    import zmq
    from traitlets.config import Config

    return Config({"KernelManager": {"transport_encryption": "auto" if zmq.has("curve") else "disabled"}})


def run_one(nb_path: Path, out_dir: Path, parameters: dict | None = None, kernel_name: str = "python3") -> Report:
    """Execute one notebook into ``out_dir`` with papermill and export it to HTML."""
    import papermill as pm

    start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    executed = out_dir / nb_path.name
    pm.execute_notebook(
        str(nb_path), str(executed), parameters=parameters or {}, kernel_name=kernel_name,
        cwd=str(nb_path.parent), progress_bar=False, log_output=False, config=_kernel_config(),
    )
    html_path = out_dir / f"{nb_path.stem}.html"
    figures = to_html(executed, html_path)
    title, summary = describe(nb_path)
    return Report(nb_path.name, title, summary, html_path, time.perf_counter() - start, figures)


def write_index(reports: list[Report], out_dir: Path, note: str = "") -> Path:
    """An index page linking each report with one line of what it shows."""
    items = "\n".join(
        f'<li><a href="{html.escape(r.html.name)}">{html.escape(r.title)}</a>'
        f"<p>{html.escape(r.summary)}</p><small>{r.figures} figure(s), built in {r.seconds:.1f} s</small></li>"
        for r in reports
    )
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kvlab reports</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; color: #222; }}
li {{ margin: 1rem 0; }} li p {{ margin: .25rem 0; }} small {{ color: #666; }}
.legend {{ background: #f4f4f4; padding: .5rem 1rem; border-radius: 6px; }}
</style></head><body>
<h1>kvlab reports</h1>
<p class="legend">Every figure is labelled <b>published</b> (a document's number, cited),
<b>measured</b> (a real engine run, with the host it ran on) or <b>modelled</b> (kvlab's physical model).</p>
<ol>
{items}
</ol>
<p><small>Built {stamp}. {html.escape(note)}</small></p>
</body></html>
"""
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    (out_dir / "index.json").write_text(
        json.dumps([{**r.__dict__, "html": r.html.name} for r in reports], indent=2, default=str)
    )
    return index


def _with_earlier(reports: list[Report], out_dir: Path) -> list[Report]:
    """The reports just built plus earlier ones still in ``out_dir`` (a partial rebuild keeps the index whole)."""
    built = {r.notebook for r in reports}
    earlier = []
    index = out_dir / "index.json"
    if index.exists():
        for e in json.loads(index.read_text()):
            if e["notebook"] not in built and (out_dir / e["html"]).exists():
                earlier.append(Report(**{**e, "html": out_dir / e["html"]}))
    return sorted([*reports, *earlier], key=lambda r: r.notebook)


def build(
    out_dir: Path = REPORTS_DIR,
    selected: list[str] | None = None,
    parameters: dict | None = None,
    workers: int | None = None,
    progress=None,
) -> list[Report]:
    """Execute the selected notebooks (in parallel processes) and write the index.

    ``parameters`` are passed to every notebook; papermill ignores names a notebook lacks only
    with a warning, so pass notebook-specific ones through :func:`run_one`. ``progress`` is an
    optional callable(report) for a progress bar.
    """
    paths = notebooks(selected)
    workers = workers or min(len(paths), os.cpu_count() or 1) or 1
    reports: list[Report] = []
    errors: list[str] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_one, p, out_dir, parameters): p for p in paths}
        for fut in as_completed(futures):
            try:
                r = fut.result()
                reports.append(r)
                if progress:
                    progress(r)
            except Exception as exc:  # keep building the others, then fail naming each
                errors.append(f"{futures[fut].name}: {type(exc).__name__}: {str(exc).strip()[-2000:]}")
    if reports:
        write_index(_with_earlier(reports, out_dir), out_dir)
    if errors:
        raise RuntimeError("report build failed for:\n" + "\n".join(errors))
    return reports
