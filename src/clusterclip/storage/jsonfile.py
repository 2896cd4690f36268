"""The one reader of every JSON file clusterclip reads (:func:`read_json`), bounded in size
and depth, refusing a key given twice."""

from __future__ import annotations

import json
import os
from typing import Any

from clusterclip.errors import InputError

# Bounds of every JSON file clusterclip reads (read_json): deeper nesting or a larger file
# is refused, so that no reader recurses without end or reads a file of any size.
JSON_MAX_DEPTH = 64


JSON_MAX_BYTES = 1 << 30


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(f"duplicate key {k!r}")
        out[k] = v
    return out


def _depth(obj: Any) -> int:
    """The nesting depth of ``obj`` (a scalar: 0), computed without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict | list):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (x.values() if isinstance(x, dict) else x))
    return deepest


def parse_json(text: str | bytes, source: str, what: str = "", *,
               max_depth: int = JSON_MAX_DEPTH) -> Any:
    """Parse ``text`` as JSON; anything else is an InputError ``"SOURCE: PROBLEM"``
    (``source``: a file, a file and line; ``what`` it should hold, if given, ends the
    message): not JSON (with its line and column), a key given twice in one object,
    nesting deeper than ``max_depth`` levels, a number of more digits than Python reads."""
    tail = f" (expected {what})" if what else ""
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as e:
        raise InputError(f"{source}: {e} (each key may appear once in an object){tail}"
                         ) from None
    except json.JSONDecodeError as e:
        raise InputError(f"{source}: not JSON (line {e.lineno} column {e.colno}: "
                         f"{e.msg}){tail}") from None
    except RecursionError:
        raise InputError(f"{source}: JSON nested deeper than {max_depth} levels{tail}"
                         ) from None
    except UnicodeDecodeError as e:
        raise InputError(f"{source}: not UTF-8 text (byte {e.start}){tail}") from None
    except ValueError as e:  # an integer of more digits than Python reads
        msg = str(e).split(";")[0].splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"{source}: a number out of range ({msg}){tail}") from None
    if _depth(obj) > max_depth:
        raise InputError(f"{source}: JSON nested deeper than {max_depth} levels{tail}")
    return obj


def read_json(path: str | os.PathLike[str], what: str = "", *,
              max_depth: int = JSON_MAX_DEPTH, max_bytes: int = JSON_MAX_BYTES) -> Any:
    """Read the JSON file ``path``: the one reader of every JSON file clusterclip reads
    (mixtures, records, manifests, stored runs, indexes). Anything but JSON of at most
    ``max_bytes`` bytes and ``max_depth`` levels, with no key given twice in one object,
    is an InputError naming the file (see :func:`parse_json`; ``what``: what it should
    hold), as is a file that cannot be read; ``FileNotFoundError`` stays itself, for the
    callers that treat a missing file apart."""
    tail = f" (expected {what})" if what else ""
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e}){tail}") from None
    if len(data) > max_bytes:
        raise InputError(f"{path}: larger than {max_bytes:,} bytes, more than a JSON file "
                         f"clusterclip reads{tail}")
    return parse_json(data, str(path), what, max_depth=max_depth)
