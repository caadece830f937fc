"""Real PostgreSQL servers for the test suite (see pg_harness.py).

``pg18`` and ``pg15`` are started once per session, on first use; ``pg`` runs a test on
each of them (ids ``pg18`` and ``pg15``). Every server is stopped when the session ends.
Tests share a server, so each should create its own slots, publications and tables under
names of its own (``unique_name`` helps).
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile
import time
from typing import Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pg_harness import PgServer  # noqa: E402

_counter = itertools.count()

#: A run writes some GB under the temp dir (servers, lakes, Spark's executors); below this
#: free space it fails with "No space left on device" somewhere far from the cause.
LOW_DISK_GB = 10


def pytest_sessionstart(session: pytest.Session) -> None:
    """One line with the free disk, even under ``-q`` (which hides the report header)."""
    free = shutil.disk_usage(tempfile.gettempdir()).free / 2**30
    low = f" (low: a full run needs about {LOW_DISK_GB} GB)" if free < LOW_DISK_GB else ""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"free disk under {tempfile.gettempdir()}: {free:.1f} GB{low}")


#: The session's servers, in start order, for the slot clean-up below.
_servers: list[PgServer] = []


@pytest.fixture(scope="session")
def pg18() -> Iterator[PgServer]:
    with PgServer(version=18) as server:
        _servers.append(server)
        yield server
        _servers.remove(server)


@pytest.fixture(scope="session")
def pg15() -> Iterator[PgServer]:
    with PgServer(version=15) as server:
        _servers.append(server)
        yield server
        _servers.remove(server)


def _slots(server: PgServer) -> set[str]:
    return {row[0] for row in server.query("SELECT slot_name FROM pg_replication_slots")}


@pytest.fixture(scope="module", autouse=True)
def drop_module_slots() -> Iterator[None]:
    """Drop the replication slots a test module left on the shared servers.

    A permanent slot outlives the test that made it: it holds WAL and one of the server's
    ``max_replication_slots``, so a few modules' leftovers would starve the next module.
    A slot still active at the end of its module is a leak of a stream, and fails loudly.
    """
    before = {id(server): _slots(server) for server in _servers}
    yield
    for server in list(_servers):
        left = _slots(server) - before.get(id(server), set())
        deadline = time.monotonic() + 15  # a closed stream's walsender exits asynchronously
        while left:
            for name, _ in server.query(
                    "SELECT slot_name, pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                    " WHERE slot_name = ANY(%s) AND NOT active", (sorted(left),)):
                left.discard(name)
            left &= _slots(server)
            if left and time.monotonic() > deadline:
                pytest.fail(f"slots still streaming at the end of the module on {server}: {sorted(left)}")
            if left:
                time.sleep(0.2)


@pytest.fixture(scope="session", params=[18, 15], ids=["pg18", "pg15"])
def pg(request: pytest.FixtureRequest) -> PgServer:
    server: PgServer = request.getfixturevalue(f"pg{request.param}")
    return server


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A name no other test uses on the shared servers: a valid, lower-case identifier."""
    base = "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:40]
    return f"{base}_{os.getpid()}_{next(_counter)}"
