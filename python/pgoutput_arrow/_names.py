"""Naming what was misspelt: the nearest known name, for the errors of every option check
(``stream()``'s keywords, the Spark data sources' options)."""

from __future__ import annotations

import difflib
from typing import Collection, Sequence

__all__ = ["unknown_options"]


def unknown_options(unknown: Sequence[str], known: Collection[str]) -> str:
    """``"unknown options 'tabel' (did you mean 'table'?), 'x'"``: each name of ``unknown``
    with the nearest of ``known`` where one is close. Names are compared without regard to case
    (Spark's options are case-insensitive); the hint is spelt as in ``known``."""
    by_lower = {k.lower(): k for k in known}
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name.lower(), list(by_lower), 1)
        hints.append(f"{name!r} (did you mean {by_lower[close[0]]!r}?)" if close else repr(name))
    return f"unknown option{'s' if len(hints) > 1 else ''} {', '.join(hints)}"
