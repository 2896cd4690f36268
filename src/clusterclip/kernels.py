"""The optional compiled kernels (built by ``setup.py``): loading one, and the switch.

Each kernel reproduces a Python / numpy reference path bit for bit; where it is not
built (no C compiler at install time), is a stale build, or ``CLUSTERCLIP_KERNEL=off``,
the reference path runs instead (the same results, slower).
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType


def load_kernel(name: str, version: int) -> ModuleType | None:
    """The extension module ``name`` if it is built and its ``VERSION`` is ``version``;
    None otherwise (a stale build is named in a warning)."""
    try:
        kernel = importlib.import_module(name)
    except ImportError:  # built without a C compiler
        return None
    if getattr(kernel, "VERSION", None) != version:
        warnings.warn(f"{name} is a stale build (version {getattr(kernel, 'VERSION', None)}, "
                      f"expected {version}): using the reference path; rebuild it (pip "
                      f"install -e . or python setup.py build_ext --inplace)", RuntimeWarning,
                      stacklevel=2)
        return None
    return kernel


def kernels_enabled() -> bool:
    """False when the environment variable ``CLUSTERCLIP_KERNEL`` is ``off`` (or 0, false,
    no): every kernel's reference path runs."""
    return os.environ.get("CLUSTERCLIP_KERNEL", "").strip().lower() \
        not in ("off", "0", "false", "no")
