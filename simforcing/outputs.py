"""The results folder of a command that writes several files (``rollout``, ``policy eval``, ``model fit-judge``,
``evaluate``, ``generate``, ``policy estimate`` / ``agreement`` / ``probe``; ``sweep`` checks it only): checked
before any work, written whole or not at all.

    with results_folder(args.out, "--out", "rollout", ROLLOUT_FILES) as tmp:   # refusals first (below)
        ...write rollout.json, videos/, ... into tmp...
    # OUT now holds exactly this command's results; on an error or Ctrl-C OUT is as it was and tmp is gone

``--out`` may be a path that does not exist yet, an empty folder, or a folder holding only what this command
writes (``owned``: an earlier result of the same command, plus the demo's ``provenance.json``) — that earlier result
is replaced as a whole, so no file of it (an old video) stays beside the new results. Refused by name, before any
work (ConfigError, exit 2): a file; a training run, a dataset, a success judge or another command's results
(``runs.folder.what_folder``); a folder holding anything else (a user's files, listed). The results are built in a
temporary sibling folder that replaces ``OUT`` only once complete (``utils.staged_folder``), so an interrupted or
failed command leaves no half-written result that reads as complete.
"""

from __future__ import annotations

import fnmatch
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Sequence

from simforcing.config import ConfigError
from simforcing.runs.folder import what_folder
from simforcing.runs.provenance import PROVENANCE_FILE
from simforcing.utils import check_output_path, staged_folder


def check_results_folder(out: str | Path, flag: str, what: str, owned: Sequence[str],
                         tagged: Optional[tuple[str, tuple]] = None) -> Path:
    """ConfigError naming ``flag`` unless ``out`` may receive ``what`` (module docstring); creates nothing.
    ``owned``: file names or patterns (``sample_*.mp4``); ``tagged``: (file, result kinds) — a file of that name in
    ``out`` must hold one of those kinds (``result_files.kind_of``; None: an untagged result), so that one command's
    eval.json never replaces another's."""
    out = check_output_path(out, flag)
    if not out.is_dir() or not any(out.iterdir()):
        return out
    names = sorted(p.name for p in out.iterdir())
    strangers = [n for n in names if n != PROVENANCE_FILE and not any(fnmatch.fnmatchcase(n, o) for o in owned)]
    if tagged is not None and (out / tagged[0]).is_file():
        _check_kind(out / tagged[0], tagged[1], flag, what)
    kind = what_folder(out)
    if strangers and kind is not None:
        raise ConfigError(f"{flag}: {out} is {kind}; {what} is written to a folder of its own — choose another "
                          "folder")
    if strangers:
        shown = ", ".join(strangers[:5]) + (f" and {len(strangers) - 5} more" if len(strangers) > 5 else "")
        raise ConfigError(f"{flag}: {out} holds files that are not {what} ({shown}); they would be mixed with the "
                          "results — choose another folder or an empty one")
    return out


def _check_kind(path: Path, kinds: tuple, flag: str, what: str) -> None:
    """ConfigError naming ``flag`` when the result file ``path`` holds none of ``kinds``."""
    from simforcing.result_files import kind_of

    try:
        got, _, name = kind_of(json.loads(path.read_text()))
    except (OSError, ValueError):
        got, name = "", "a file that is not JSON"
    if got not in kinds:
        raise ConfigError(f"{flag}: {path} holds {name}, not {what}; it would be replaced — choose another folder")


@contextmanager
def results_folder(out: str | Path, flag: str, what: str, owned: Sequence[str],
                   tagged: Optional[tuple[str, tuple]] = None) -> Iterator[Path]:
    """A temporary folder to write ``what`` into, which replaces ``out`` once the block ends without an error
    (module docstring); the refusals of :func:`check_results_folder` come first."""
    out = check_results_folder(out, flag, what, owned, tagged)
    with staged_folder(out, overwrite=True, what=what) as tmp:
        yield tmp
