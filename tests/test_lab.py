"""`make lab` (= `kvlab lab`) opens the notebooks as the user the suite runs as (root included): the server answers
on 127.0.0.1 behind its token and lists the seven notebooks, copies in a working folder: saving one changes the copy,
never the tracked template in notebooks/, and reports/ is reachable beside them."""

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from kvlab import reports
from kvlab.cli import lab_argv, prepare_lab
from kvlab.paths import NOTEBOOKS_DIR


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, json.loads(r.read())


def _put(url: str, token: str, model: dict):
    request = urllib.request.Request(
        url,
        data=json.dumps(model).encode(),
        method="PUT",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        return r.status


def test_lab_starts_as_this_user_and_lists_the_notebooks(tmp_path):
    port, token = _free_port(), secrets.token_hex(16)
    env = os.environ | {
        "JUPYTER_TOKEN": token,
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "set"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "ws"),
    }
    folder, report_dir = tmp_path / "lab", tmp_path / "reports"
    report_dir.mkdir()
    (report_dir / "index.html").write_text("<p>reports</p>")
    prepare_lab(folder, reports=report_dir)
    templates = {p.name: p.read_bytes() for p in NOTEBOOKS_DIR.glob("*.ipynb")}
    proc = subprocess.Popen(
        lab_argv(port, open_browser=False, root=folder),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        base, listing = f"http://127.0.0.1:{port}/api/contents", None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, listing = _get(f"{base}?token={token}")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.5)
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert listing is not None, "JupyterLab did not answer within 120 s"
        names = sorted(c["name"] for c in listing["content"] if c["name"].endswith(".ipynb"))
        assert names == sorted(p.name for p in reports.notebooks()) and len(names) == 7
        # the reports are reachable from the working folder
        status, listed = _get(f"{base}/reports?token={token}")
        assert status == 200 and [c["name"] for c in listed["content"]] == ["index.html"]
        # saving a notebook changes the working copy, never the tracked template
        status, nb = _get(f"{base}/{names[0]}?token={token}&content=1")
        nb["content"]["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "a note of mine"})
        assert _put(f"{base}/{names[0]}", token, {"type": "notebook", "content": nb["content"]}) == 200
        assert b"a note of mine" in (folder / names[0]).read_bytes()
        assert {p.name: p.read_bytes() for p in NOTEBOOKS_DIR.glob("*.ipynb")} == templates
        # the token is required: without it the API refuses
        try:
            _get(base)
            refused = False
        except urllib.error.HTTPError as e:
            refused = e.code in (401, 403)
        assert refused
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


def test_lab_binds_localhost_and_allows_root_only_as_root():
    argv = lab_argv(9999, open_browser=False)
    assert "--ServerApp.ip=127.0.0.1" in argv and "--no-browser" in argv
    assert ("--allow-root" in argv) == (os.geteuid() == 0)


def test_lab_copies_the_notebooks_once_and_keeps_a_saved_copy(tmp_path):
    """The working folder gets each template once; a copy the user saved is never overwritten, and a template changed
    since its copy was made is named; reports/ is a link to the reports folder (made when there is none yet)."""
    templates, folder, report_dir = tmp_path / "notebooks", tmp_path / "lab", tmp_path / "reports"
    templates.mkdir()
    (templates / "01_a.ipynb").write_text("template 1")
    (templates / "02_b.ipynb").write_text("template 2")
    notes = prepare_lab(folder, templates, report_dir)
    assert sorted(p.name for p in folder.glob("*.ipynb")) == ["01_a.ipynb", "02_b.ipynb"] and len(notes) == 2
    assert (folder / "reports").is_symlink() and (folder / "reports").resolve() == report_dir.resolve()
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"  # git never sees what is saved there
    (folder / "01_a.ipynb").write_text("my work")
    assert prepare_lab(folder, templates, report_dir) == []  # nothing new: the saved copy stays
    (templates / "01_a.ipynb").write_text("template 1, revised")
    (notes,) = prepare_lab(folder, templates, report_dir)
    assert "01_a.ipynb is your copy" in notes and "has changed" in notes
    assert (folder / "01_a.ipynb").read_text() == "my work" and (templates / "01_a.ipynb").read_text().endswith(
        "revised"
    )
    (folder / "01_a.ipynb").unlink()  # deleting the copy takes the new template
    prepare_lab(folder, templates, report_dir)
    assert (folder / "01_a.ipynb").read_text() == "template 1, revised"


def test_kvlab_lab_and_make_lab_take_the_port_and_open_the_working_folder(tmp_path, monkeypatch):
    """`kvlab lab --port` and `make lab PORT=…` (without starting a server: the exec is caught)."""
    from typer.testing import CliRunner

    from kvlab import cli
    from kvlab.paths import ROOT

    ran = []
    monkeypatch.setattr(cli.os, "execv", lambda program, argv: ran.append(argv))
    monkeypatch.setattr(cli, "REPORTS_DIR", tmp_path / "reports")  # the repository's reports/ stays as it is
    folder = tmp_path / "lab"
    res = CliRunner().invoke(cli.app, ["lab", "--port", "9123", "--no-browser", "--dir", str(folder)])
    assert res.exit_code == 0, res.output
    (argv,) = ran
    assert f"--ServerApp.root_dir={folder}" in argv and "--ServerApp.port=9123" in argv and "--no-browser" in argv
    assert not any(a.startswith("--ServerApp.root_dir=") and a.endswith("/notebooks") for a in argv)
    assert sorted(p.name for p in folder.glob("*.ipynb")) == sorted(p.name for p in NOTEBOOKS_DIR.glob("*.ipynb"))
    assert (folder / "reports").resolve() == (tmp_path / "reports").resolve()
    assert cli.LAB_DIR.parent == ROOT and cli.LAB_DIR != NOTEBOOKS_DIR
    plan = subprocess.run(
        ["make", "-n", "--no-print-directory", "lab", "PORT=9123"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert plan.returncode == 0 and plan.stdout.strip().splitlines()[-1].endswith("kvlab lab --port 9123"), plan


def test_a_figure_replotted_with_pyplot_is_drawn_once(tmp_path):
    """A re-plot in JupyterLab (``fig, ax = plt.subplots()`` … ``display(wb.show(fig, caption))``) is drawn by the
    figure view alone: the inline backend draws, at the end of a cell, the figures pyplot still manages, so
    wb.show hands the figure back from pyplot (it was drawn twice). A plain Figure (every kvlab.plots one) is untouched.
    """
    code = """
import matplotlib
matplotlib.use("module://matplotlib_inline.backend_inline")
import matplotlib.pyplot as plt
from matplotlib._pylab_helpers import Gcf
from matplotlib.figure import Figure
from kvlab.workbook import Workbook

wb = Workbook(__import__("pathlib").Path("."))
fig, ax = plt.subplots()
ax.plot([1, 2])
plain = Figure()
plain.add_subplot().plot([2, 1])
views = [wb.show(fig, "a re-plot"), wb.show(plain, "a kvlab figure")]
assert Gcf.get_all_fig_managers() == [], "pyplot still holds the figure: the inline backend would draw it again"
assert all(v.png()[:8] == b"\\x89PNG\\r\\n\\x1a\\n" and "<img" in v._repr_html_() for v in views)
assert [v.number for v in views] == [1, 2]
print("once")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "once", out.stderr[-3000:]
