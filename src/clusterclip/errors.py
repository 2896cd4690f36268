"""The one error type that the command line turns into a clean exit.

Raise :class:`InputError` for anything the *user* got wrong (a bad file, line,
value or option). ``clusterclip`` prints its message on one line and exits
with code 2. Everything else is a bug and keeps its traceback.

Code below the command line speaks of its own parameters (``world_size must be
>= 1``) and names them in ``params``; the command line shows each named
parameter as the option that sets it (``--world-size must be >= 1``), see
:func:`flag_message`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping


class InputError(ValueError):
    """Bad input from the user: a file, a line, an option value.

    A :class:`ValueError`, so a library caller's ``except ValueError`` catches every
    refusal (as scikit-learn's ``InvalidParameterError`` is one).

    The message must name the offending file, line or value, fit on one line
    and make sense without a traceback. ``params``: the parameter names the
    message mentions (as whole words), which a front end may rename.
    """

    def __init__(self, message: str = "", *, params: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.params = tuple(params)


def flag_message(error: InputError, flags: Mapping[str, str]) -> str:
    """``error``'s message with each parameter it names (``error.params``) written as its
    option in ``flags`` (parameter -> option, e.g. ``{"world_size": "--world-size"}``);
    a parameter without an option keeps its name. Every mention as a whole word is
    renamed: a message that also uses the name otherwise (``n_k ** alpha``) does not
    list it in ``params``."""
    text = str(error)
    for name in getattr(error, "params", ()):
        flag = flags.get(name)
        if flag:
            # not inside a word, a file name (``tokenizer.json``) or a path (``hf/model``)
            text = re.sub(rf"(?<![\w./\\-]){re.escape(name)}(?![\w/\\-]|\.\w)", flag,
                          text)
    return text
