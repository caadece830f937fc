"""The progress line on stderr, and the short numbers it shows."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress", "si", "nbytes"]


def si(n: float) -> str:
    """``1.2M``, ``350.0k``, ``42``."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def nbytes(n: float) -> str:
    """``1.2 MB``, ``42 B``."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


class Progress:
    """One line on stderr, rewritten in place (``\\r``), cleared at the end; shown only when
    ``enabled`` (None: when stderr is a terminal), at most every ``interval`` seconds and
    not before ``delay`` seconds have passed."""

    def __init__(self, enabled: bool | None, interval: float = 0.2, delay: float = 1.0) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.interval = interval
        self.start = time.monotonic()
        self.delay = delay
        self.last = 0.0
        self.shown = False

    def due(self, force: bool = False) -> bool:
        """Whether to show a line now."""
        if not self.enabled:
            return False
        now = time.monotonic()
        if not force and (now - self.start < self.delay or now - self.last < self.interval):
            return False
        self.last = now
        return True

    def show(self, text: str) -> None:
        sys.stderr.write(f"\r{text}\x1b[K")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
