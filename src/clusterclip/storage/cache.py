"""The folder of clusterclip's on-disk caches (:func:`cache_dir`)."""

from __future__ import annotations

import os
from pathlib import Path

from clusterclip.errors import InputError


def cache_dir() -> Path | None:
    """The folder of clusterclip's caches (the sampler's seek index, the fast embedder's table).

    ``$CLUSTERCLIP_CACHE`` when set (empty, ``0``, ``off`` or ``none``: no disk cache,
    None), else ``$XDG_CACHE_HOME/clusterclip`` or ``~/.cache/clusterclip``. Every file
    in it is keyed by its inputs and checked when read, so any folder is safe to reuse.
    A place that cannot be a writable folder (a file on the way, a link to nothing) is an
    InputError naming the variable it came from, before any work that would fill it.
    """
    env = os.environ.get("CLUSTERCLIP_CACHE")
    if env is not None:
        if env.strip().lower() in ("", "0", "off", "none"):
            return None
        path, var = Path(env), "CLUSTERCLIP_CACHE"
    elif os.environ.get("XDG_CACHE_HOME"):
        path, var = Path(os.environ["XDG_CACHE_HOME"]) / "clusterclip", "XDG_CACHE_HOME"
    else:
        path, var = Path.home() / ".cache" / "clusterclip", "HOME"
    problem = _folder_problem(path)
    if problem:
        raise InputError(f"cache folder {path} (from ${var}): {problem}; set "
                         f"CLUSTERCLIP_CACHE to a folder clusterclip may write, or to off")
    return path


def _folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot be (or be made) a writable folder, or None: the first part of it
    that exists must be a folder we may write in, and none a link to nothing."""
    for p in (path, *path.parents):
        if p.is_symlink() and not p.exists():
            return f"{p} is a symbolic link to nothing"
        if p.exists():
            if not p.is_dir():
                return f"{p} is a file, not a folder"
            if not os.access(p, os.W_OK | os.X_OK):
                return f"{p} is not writable"
            return None
    return None
