"""`make lab` (= `kvlab lab`) opens the notebooks as the user the suite runs as (root included): the server answers
on 127.0.0.1 behind its token and lists the seven notebooks."""

import json
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request

from kvlab import reports
from kvlab.cli import lab_argv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, json.loads(r.read())


def test_lab_starts_as_this_user_and_lists_the_notebooks(tmp_path):
    port, token = _free_port(), secrets.token_hex(16)
    env = os.environ | {
        "JUPYTER_TOKEN": token,
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "set"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "ws"),
    }
    proc = subprocess.Popen(
        lab_argv(port, open_browser=False),
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
