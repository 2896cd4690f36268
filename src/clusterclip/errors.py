"""The one error type that the command line turns into a clean exit.

Raise :class:`InputError` for anything the *user* got wrong (a bad file, line,
value or option). ``clusterclip`` prints its message on one line and exits
with code 2. Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad input from the user: a file, a line, an option value.

    The message must name the offending file, line or value, fit on one line
    and make sense without a traceback.
    """
