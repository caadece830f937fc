"""The tests' helper threads (writers, consumers, workloads): :class:`CheckedThread`, whose
``join()`` raises what the thread raised, and fails when the thread is still running at the
timeout, so that a test never passes over a helper that failed or hung."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any


class CheckedThread(threading.Thread):
    def __init__(self, target: Callable[..., Any], args: Iterable[Any] = (),
                 daemon: bool | None = None, name: str | None = None) -> None:
        super().__init__(target=self._run_checked, args=(target, tuple(args)), daemon=daemon,
                         name=name or getattr(target, "__name__", None))
        self.error: BaseException | None = None

    def _run_checked(self, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            target(*args)
        except BaseException as e:  # noqa: BLE001 - raised again by join()
            self.error = e

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.is_alive():
            raise AssertionError(f"thread {self.name} still runs {timeout} s after it was joined")
        error, self.error = self.error, None
        if error is not None:
            raise error
