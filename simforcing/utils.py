"""Small shared helpers: atomic file writes, folders that appear atomically, seeding, device choice, mixed
precision, JSON lines.

Every write here turns an operating-system failure (a full disk, a missing permission) into
:class:`~simforcing.errors.OutputError` naming the file and the cause; a failed atomic write leaves the previous
file as it was and no temporary file behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch

from simforcing.errors import ConfigError, OutputError, os_cause

def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` via ``write(tmp_path)`` then an atomic rename; a crash leaves the old file intact.

    An OSError on the way (disk full, no permission) is raised as OutputError naming ``path`` and the cause."""
    path = Path(path)
    tmp_path = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        write(tmp_path)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except OSError as e:
        _discard(tmp_path)
        raise OutputError(f"cannot write ({os_cause(e)})", path, e) from e
    except BaseException:
        _discard(tmp_path)
        raise


def _discard(tmp_path: Path | None) -> None:
    if tmp_path is not None:
        try:
            tmp_path.unlink(missing_ok=True)
        except OSError:
            pass


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda p: p.write_text(text))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if callable(getattr(o, "to_json", None)):  # a typed result (``policy.closed_loop.results``) in a report's dict
        return o.to_json()
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, torch.Tensor):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def append_jsonl(path: str | Path, obj: dict) -> None:
    """Append one JSON line (OutputError naming the file when the write fails)."""
    line = json.dumps(obj, default=_json_default) + "\n"
    try:
        with open(path, "a") as f:
            f.write(line)
    except OSError as e:
        raise OutputError(f"cannot append ({os_cause(e)})", path, e) from e


# ----------------------------------------------------------------------------------------------------------------------
# Folders that appear atomically
# ----------------------------------------------------------------------------------------------------------------------


def check_output_folder(out: Path, overwrite: bool, what: str = "dataset",
                        replaceable: Callable[[Path], bool] | None = None) -> None:
    """FileExistsError (exit 2) unless ``out`` is absent or empty, or ``overwrite`` and ``replaceable(out)``;
    ConfigError when it cannot be created (``check_output_path``)."""
    out = Path(out)
    if not out.exists():
        check_output_path(out, "OUT")
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    ours = out.is_dir() and (replaceable is None or replaceable(out))
    if not ours:
        raise FileExistsError(f"{out}: exists and is not a {what}; choose another folder (--overwrite replaces a "
                              f"{what} only, never another folder)")
    if not overwrite:
        raise FileExistsError(f"{out}: already holds a {what}; pass --overwrite to replace it, or choose another "
                              "folder")


@contextmanager
def staged_folder(out: str | Path, overwrite: bool = False, what: str = "dataset",
                  replaceable: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Build a folder under a temporary sibling name and let it appear at ``out`` only once it is complete.

        with staged_folder(OUT, overwrite=args.overwrite) as tmp:
            ...write everything into tmp...
        # OUT now holds it; on an exception OUT is untouched and tmp is removed

    ``out`` that exists and is not empty is refused with FileExistsError (exit 2) unless ``overwrite``; even then
    only a folder ``replaceable(out)`` says is a ``what`` is replaced (never another kind of folder). The
    replacement is two renames in the same parent (``out`` -> an ``.old`` sibling, the staged folder -> ``out``), so
    no reader ever sees a half-written folder at ``out`` (for an instant there is none). OSErrors become OutputError.
    """
    out = Path(out)
    check_output_folder(out, overwrite, what, replaceable)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as e:
        raise OutputError(f"cannot create a temporary folder beside it ({os_cause(e)})", out, e) from e
    try:
        yield tmp
        _swap_in(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(f"cannot write the {what} ({os_cause(e)}); {out} was left as it was", out, e) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap_in(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``; an existing ``out`` is moved aside first and restored if the rename fails."""
    if not out.exists():
        os.replace(tmp, out)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.replace(out, aside / out.name)
    try:
        os.replace(tmp, out)
    except OSError:
        os.replace(aside / out.name, out)
        shutil.rmtree(aside, ignore_errors=True)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def relative_to(path: str | Path, base: str | Path) -> str:
    """``path`` relative to ``base`` when it lies inside it (both resolved), else as given: how a report in ``base``
    links its pictures."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path(base).resolve()))
    except ValueError:
        return str(p)


WHOLE_FILE_BYTES = 256 << 20  # weight files up to this size are hashed whole; larger ones sampled (weights_digest)


def weights_digest(folder: str | Path) -> Optional[str]:
    """What a VAE or state-probe folder holds, as a short digest of its weight files (every ``*.safetensors`` at its
    top level, by name and content: a file up to 256 MiB whole, a larger one — a Wan2.2 VAE — by its size and 16
    evenly spaced MiB, so a run checks its VAE in milliseconds); None when the folder holds none (or is no folder).
    Two folders with the same weights have the same digest wherever they lie; a VAE fitted on other data has
    another (``runs.folder.located`` compares it with the one a run recorded)."""
    folder = Path(folder)
    try:
        files = sorted(f for f in folder.iterdir() if f.suffix == ".safetensors" and f.is_file())
    except OSError:
        return None
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        size = f.stat().st_size
        h.update(f"{f.name}:{size}:".encode())
        with open(f, "rb") as fh:
            if size <= WHOLE_FILE_BYTES:
                while block := fh.read(1 << 22):
                    h.update(block)
            else:
                for i in range(16):
                    fh.seek((size - (1 << 20)) * i // 15)
                    h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]


def fmt_num(v: Optional[float], nd: int = 3) -> str:
    """A number for a markdown table: ``nd`` decimals, "—" for a missing one (a metric without weights, a failed run)."""
    return "—" if v is None else f"{v:.{nd}f}"


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any tuple of parts (stable across processes and platforms)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def resolve_device(name: str = "auto", flag: str = "train.device") -> torch.device:
    """``auto`` (CUDA when there is a device, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``. ConfigError naming
    ``flag`` for another name or a CUDA device this machine does not have — before any work is done."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"{flag}: got {name!r}; expected auto, cpu, cuda or cuda:N")
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (dev.index is not None and dev.index >= count):
            why = "this torch is a CPU build" if torch.version.cuda is None else f"{count} CUDA device(s) visible"
            raise ConfigError(f"{flag}: {name!r} asked for, but this machine has no such CUDA device ({why}); use "
                              "cpu or auto")
    return dev


def check_output_path(path: str | Path, flag: str, folder: bool = True) -> Path:
    """ConfigError naming ``flag`` when ``path`` cannot be written — checked before any work: a file where a folder
    must be (the path itself, or a parent), a folder where a file must be (``folder=False``), or no permission to
    create it. Creates nothing."""
    p = Path(path)
    if folder and p.exists() and not p.is_dir():
        raise ConfigError(f"{flag}: {p} is a file; expected a folder (or a path that does not exist yet)")
    if not folder and p.is_dir():
        raise ConfigError(f"{flag}: {p} is a folder; expected a file to write")
    base = p if folder and p.is_dir() else p.parent
    while not base.exists() and not base.is_symlink() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise ConfigError(f"{flag}: {base} is a file, so {p} cannot be created under it; choose another path")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag}: cannot write in {base} (permission denied); choose another path")
    return p


def autocast_context(cfg, device: torch.device | str, cuda_only: bool = False):
    """bf16 autocast when ``cfg.train.mixed_precision == "bf16"`` (``cfg`` a Config), else a null context.

    CUDA: only on a device that supports bf16. Other devices (CPU): autocast too, unless ``cuda_only`` — the sampler
    keeps full precision off CUDA; training autocasts wherever it is asked to.
    """
    device = torch.device(device)
    dtype = autocast_dtype(cfg, device)
    if dtype is None or (cuda_only and device.type != "cuda"):
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def autocast_dtype(cfg, device: torch.device | str) -> Optional[torch.dtype]:
    """The dtype training autocasts to on ``device`` (:func:`autocast_context`), or None where it does not."""
    device = torch.device(device)
    if cfg.train.mixed_precision != "bf16":
        return None
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return None
    return torch.bfloat16
