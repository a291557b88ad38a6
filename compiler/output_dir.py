"""The output folder of a build: checked before any work, replaced only when it is ours.

A build writes into a staging folder next to the output folder and renames
it into place at the end, so the output folder is either the previous one or
the complete new one. The rules that keep users' files safe:

* an existing output folder is replaced only if it is empty or a previous
  tfaot output (its manifest lists every file in it); anything else is
  refused before the slow stages, naming the files that are not tfaot's
  (``--force`` replaces it anyway);
* the model being compiled is never inside what a build replaces;
* staging folders are named after the output folder and the building
  process (``.OUT.tfaot-staging.PID``), so a later build to the same place
  removes those left by a killed build, and only those.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .errors import TfaotError

_STAGING = "tfaot-staging"
_OLD = "tfaot-old"
#: Folders of an output that tfaot fills with files it does not list one by one.
_UNLISTED_DIRS = ("temps",)


@dataclass
class OutputFolder:
    """Where a build goes: ``path`` (absolute) and its staging folder."""

    path: Path
    staging: Path

    def commit(self) -> None:
        """Moves the finished staging folder to ``path``, replacing the old output."""
        if not self.path.exists():
            self.staging.rename(self.path)
            return
        old = self.path.with_name(f".{self.path.name}.{_OLD}.{os.getpid()}")
        self.path.rename(old)
        try:
            self.staging.rename(self.path)
        except OSError:
            old.rename(self.path)  # put the previous output back
            raise
        shutil.rmtree(old, ignore_errors=True)

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def prepare(out: Path, model_path: str | os.PathLike, *, force: bool = False) -> OutputFolder:
    """Checks ``out`` and makes its staging folder; raises ``TfaotError`` naming the problem."""
    path = Path(os.path.abspath(out))
    if path.parent == path:
        raise TfaotError(f"-o {out}: cannot write a build to the root folder")
    _refuse_model_inside(path, Path(model_path), out)
    if path.is_symlink():
        raise TfaotError(f"-o {out}: is a symbolic link; give the folder it points to, or "
                         "another path")
    if path.exists():
        _check_replaceable(path, out, force)
    parent = _make_parent(path.parent, out)
    _remove_stale_staging(parent, path.name)
    staging = parent / f".{path.name}.{_STAGING}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
    except OSError as e:
        raise TfaotError(f"-o {out}: cannot create a folder in {parent}: "
                         f"{e.strerror or e}") from None
    if path.exists():
        _check_renamable(path, out, staging)
    return OutputFolder(path, staging)


def _refuse_model_inside(path: Path, model: Path, out) -> None:
    real_out = Path(os.path.realpath(path))
    real_model = Path(os.path.realpath(model))
    if real_model == real_out or real_out in real_model.parents:
        raise TfaotError(f"-o {out}: the model {model} is inside that folder, which a build "
                         "replaces; choose another output folder")


def _check_replaceable(path: Path, out, force: bool) -> None:
    if not path.is_dir():
        raise TfaotError(f"-o {out}: exists and is not a folder; give the path of a new or "
                         "previous output folder")
    foreign = foreign_files(path)
    if foreign and not force:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5
                                          else "")
        raise TfaotError(f"-o {out}: the folder holds files that tfaot did not write ({shown}); "
                         "a build replaces the whole folder, so choose another one (or pass "
                         "--force to replace it anyway)")


def foreign_files(folder: Path) -> list[str]:
    """Files and folders under ``folder`` that no tfaot manifest in it lists."""
    listed = set()
    for manifest in folder.glob("*.json"):
        listed |= _manifest_files(manifest)
    if not listed:  # not a tfaot output at all: its top level says enough
        return sorted(entry.name for entry in folder.iterdir())
    foreign = []
    for entry in sorted(folder.rglob("*")):
        rel = entry.relative_to(folder).as_posix()
        if rel in listed or rel.split("/")[0] in _UNLISTED_DIRS:
            continue
        if entry.is_dir() and not entry.is_symlink() and any(
                f.startswith(rel + "/") for f in listed):
            continue
        foreign.append(rel)
    return foreign


def _manifest_files(manifest: Path) -> set[str]:
    """The files a tfaot manifest says its build wrote (none if it is not one)."""
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return set()
    if not (isinstance(data, dict) and data.get("name") == manifest.stem
            and isinstance(data.get("files"), list) and "compiler_version" in data):
        return set()
    return {f for f in data["files"] if isinstance(f, str)}


def _make_parent(parent: Path, out) -> Path:
    for ancestor in (parent, *parent.parents):
        if ancestor.exists() or ancestor.is_symlink():
            if not ancestor.is_dir():
                raise TfaotError(f"-o {out}: {ancestor} is not a folder")
            break
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TfaotError(f"-o {out}: cannot create {e.filename or parent}: "
                         f"{e.strerror or e}") from None
    return parent


def _check_renamable(path: Path, out, staging: Path) -> None:
    """An existing output must be movable (not immutable, not a mount point)."""
    probe = path.with_name(f".{path.name}.{_OLD}.{os.getpid()}")
    try:
        path.rename(probe)
        probe.rename(path)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise TfaotError(f"-o {out}: the existing folder cannot be replaced: "
                         f"{e.strerror or e}") from None


def _remove_stale_staging(parent: Path, out_name: str) -> None:
    """Removes staging folders of builds to the same output that were killed."""
    for kind in (_STAGING, _OLD):
        for entry in parent.glob(f".{out_name}.{kind}.*"):
            pid = entry.name.rsplit(".", 1)[-1]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
