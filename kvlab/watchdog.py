"""Kill an engine's process group when the harness that started it dies, however it dies.

``kvlab.server`` starts one watchdog per engine server, in its own session, with a pipe from the
harness as its stdin. The harness never writes to it: the watchdog blocks reading it and gets end
of file only when every copy of the write end is closed, which the kernel does when the harness
exits, including by SIGKILL (when no atexit or signal handler runs). It then sends SIGTERM to the
engine's process group, waits ``grace_s`` and sends SIGKILL to what is left, then removes the engine's own
temporary folder (FOLDER, where given: its TMPDIR). A normal stop kills the group and removes the folder first
and then closes the pipe, so the watchdog finds nothing to kill or remove and exits.

Standard library only, run by file path, so it starts in tens of milliseconds and imports nothing
of kvlab. Usage: ``python watchdog.py PGID GRACE_S [FOLDER]``.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies do not count: an orphaned engine's exited
    leader can stay a zombie until init reaps it, and kill(0) would still find it)."""
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:  # no /proc: fall back to the signal probe, zombies included
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for pid in entries:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def kill_group(pgid: int, grace_s: float) -> None:
    """SIGTERM the group, wait up to ``grace_s`` for it to go, then SIGKILL what is left."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
            if sig == signal.SIGTERM:
                os.killpg(pgid, signal.SIGCONT)  # a stopped engine handles SIGTERM only once resumed
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and group_alive(pgid):
            time.sleep(0.1)


def main(argv: list[str]) -> int:
    pgid, grace_s = int(argv[1]), float(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the harness's to handle
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def on_term(signum, frame):  # someone stops the watchdog itself: take the engine with it
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        while sys.stdin.buffer.read(4096):  # the harness never writes; b"" means it is gone
            pass
    except (SystemExit, OSError):
        pass
    kill_group(pgid, grace_s)
    if len(argv) > 3:  # the engine's temporary folder, once nothing of the engine can write to it
        shutil.rmtree(argv[3], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
