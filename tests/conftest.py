"""Real PostgreSQL servers for the test suite (see pg_harness.py).

``pg18`` and ``pg15`` are started once per session, on first use; ``pg`` runs a test on
each of them (ids ``pg18`` and ``pg15``). Every server is stopped when the session ends.
Tests share a server, so each should create its own slots, publications and tables under
names of its own (``unique_name`` helps).
"""

from __future__ import annotations

import itertools
import os
import sys
from typing import Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pg_harness import PgServer  # noqa: E402

_counter = itertools.count()


@pytest.fixture(scope="session")
def pg18() -> Iterator[PgServer]:
    with PgServer(version=18) as server:
        yield server


@pytest.fixture(scope="session")
def pg15() -> Iterator[PgServer]:
    with PgServer(version=15) as server:
        yield server


@pytest.fixture(scope="session", params=[18, 15], ids=["pg18", "pg15"])
def pg(request: pytest.FixtureRequest) -> PgServer:
    server: PgServer = request.getfixturevalue(f"pg{request.param}")
    return server


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A name no other test uses on the shared servers: a valid, lower-case identifier."""
    base = "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:40]
    return f"{base}_{os.getpid()}_{next(_counter)}"
