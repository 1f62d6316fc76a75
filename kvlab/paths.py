"""Every path kvlab uses, built from one project-root constant, and how a finished folder is put in place."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

#: The repository root (the folder holding ``kvlab/``, ``data/``, ``notebooks/``).
ROOT = Path(os.environ.get("KVLAB_ROOT", Path(__file__).resolve().parent.parent))
DATA_DIR = ROOT / "data"
CATALOG_DIR = DATA_DIR / "catalog"  # GPU and model catalogs for the physical model
EXPERIMENTS_DIR = DATA_DIR / "experiments"  # shipped experiment specs (YAML)
MODELS_DIR = DATA_DIR / "models"  # locally generated tiny models (ignored by git)
NOTEBOOKS_DIR = ROOT / "notebooks"
REPORTS_DIR = ROOT / "reports"
ENGINES_DIR = ROOT / ".engines"  # per-engine virtual environments made by `make`


def private_folder_problem(path: Path) -> str | None:
    """Why ``path`` may not hold kvlab's private state (server registry, fit cache), as the rest of a sentence that
    names it ("is a symbolic link", ...); None when it is a real folder of this user's that no other user can write
    to. FileNotFoundError when it does not exist (``os.lstat``: a link is never followed)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != os.getuid():
        return f"belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"has mode {stat.S_IMODE(st.st_mode):04o}: other users can write to it"
    return None


#: Every temporary name kvlab makes beside a file or folder it writes starts with this prefix (a dot: readers skip
#: it). The partial-run cleanup removes only names that match TEMP_NAME, never a user's other dot entries.
TEMP_PREFIX = ".kvlab-tmp."
#: A kvlab temporary name: the prefix, then the name it stands in for and tempfile's random part (or ``old``).
TEMP_NAME = re.compile(r"\.kvlab-tmp\.[^/]+")


def temp_prefix(name: str) -> str:
    """The prefix of the temporary names kvlab makes for ``name`` (tempfile adds a random part)."""
    return f"{TEMP_PREFIX}{name}."


class UnsafeFolderError(Exception):
    """A folder kvlab would write into or delete from is a symbolic link, not a folder, outside the data folder, or
    owned by another user: nothing is written or removed."""


def check_inside(folder: Path, root: Path) -> None:
    """Refuse (UnsafeFolderError naming the entry) to write under ``folder`` unless every entry from inside ``root``
    down to ``folder`` that exists is a real folder (``lstat``: no symbolic link is followed) owned by this user.

    ``root`` itself may be a link (a data folder kept on another disk); what kvlab creates below it may not be,
    since a link planted there (``data/runs/<experiment> -> ~``) would have kvlab write runs into, and remove
    temporary entries from, a folder outside the data folder. Entries that do not exist yet are fine: kvlab
    creates them. Call it again after creating them when a check must cover the new entries."""
    folder, root = Path(os.path.abspath(folder)), Path(os.path.abspath(root))
    try:
        rel = folder.relative_to(root)
    except ValueError:
        raise UnsafeFolderError(f"{folder}: not inside the data folder {root}; nothing was written") from None
    here = root
    for part in rel.parts:
        if part in ("", ".", ".."):
            raise UnsafeFolderError(f"{folder}: '{part}' in a data path; nothing was written")
        here = here / part
        try:
            st = os.lstat(here)
        except (FileNotFoundError, NotADirectoryError):
            return  # neither it nor anything below it exists yet (the writability check names a file in the way)
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeFolderError(
                f"{here}: a symbolic link (to {os.readlink(here)}); kvlab writes and deletes only inside real "
                f"folders of the data folder {root}. Remove the link, or give the folder it points to as the "
                "data folder (--data-dir). Nothing was written or removed"
            )
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafeFolderError(f"{here}: not a folder; nothing was written or removed")
        if st.st_uid != os.geteuid():
            raise UnsafeFolderError(
                f"{here}: owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}); "
                "kvlab writes only into its user's folders. Nothing was written or removed"
            )


def remove_temp_entries(folder: Path, extra: re.Pattern[str] | None = None) -> list[Path]:
    """Remove the temporary entries kvlab left in ``folder`` (names matching TEMP_NAME, or ``extra``: older
    releases' exact patterns) and return them. A link is unlinked, never followed; every other entry stays."""
    removed = [
        p
        for p in Path(folder).iterdir()
        if TEMP_NAME.fullmatch(p.name) or (extra is not None and extra.fullmatch(p.name))
    ]
    for p in removed:
        remove_entry(p)
    return removed


def remove_entry(path: Path) -> None:
    """Remove one file or folder; a symbolic link is unlinked, never followed."""
    try:
        is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return
    if is_dir:
        shutil.rmtree(path, ignore_errors=True)
    else:
        Path(path).unlink(missing_ok=True)


def publish_dir(tmp: Path, final: Path) -> None:
    """Move a fully written folder into place by rename, replacing an older one: readers see old or new. The
    older one is renamed aside first; a link in its place is unlinked, never followed."""
    if os.path.lexists(final):
        old = final.parent / f"{temp_prefix(final.name)}old"
        remove_entry(old)
        os.replace(final, old)
        remove_entry(old)
    os.replace(tmp, final)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` by rename from a new file of a random name in the same folder (mode 0600,
    created with O_EXCL by mkstemp): readers see old or new, and no predictable temporary path exists that a
    link planted beforehand could redirect. A link at ``path`` itself is replaced, never written through."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(path.name), suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
