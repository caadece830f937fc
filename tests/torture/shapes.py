"""Each capture holds the message kinds its seed meant to make.

The generator records, per shape it wrote (a transaction big enough to stream, a savepoint
rolled back inside one, a prepared transaction, a replication origin, a TRUNCATE, a logical
message, ...), which pgoutput message kinds that shape must produce in which option set's
capture (:attr:`generator.Workload.expects`). A capture lacking one means the seed did not
test what it claims (the server did not stream, the table was not published, ...): a
failure of the tester itself, reported like a mismatch. Kinds are counted by the first byte
of each message (pgoutput's message type letter, PostgreSQL's protocol docs)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa

#: pgoutput's message kinds by their first byte.
KINDS = {
    "B": "Begin", "C": "Commit", "O": "Origin", "R": "Relation", "Y": "Type", "I": "Insert", "U": "Update",
    "D": "Delete", "T": "Truncate", "M": "Message", "S": "Stream Start", "E": "Stream Stop",
    "c": "Stream Commit", "A": "Stream Abort", "b": "Begin Prepare", "P": "Prepare", "K": "Commit Prepared",
    "r": "Rollback Prepared", "p": "Stream Prepare",
}


#: The end of every problem :func:`check_kinds` reports, after the count it wants.
SHORT = "the seed's shapes make at least"


def is_shape_problem(problem: str) -> bool:
    """Whether ``problem`` is :func:`check_kinds`'s: about the whole workload's shapes, which
    a part of the workload does not make (:func:`run.shrink` cannot shrink it)."""
    return SHORT in problem


def count_kinds(capture: pa.Table) -> Counter[str]:
    """How many messages of each kind (its letter) ``capture`` holds."""
    return Counter(chr(bytes(d)[0]) for d in capture.column("data").to_pylist() if d)


#: What a kind's message becomes when its transaction is streamed (a server streaming every
#: transaction): a Prepare, a Stream Prepare.
STREAMED = {"P": "p"}


def check_kinds(workload: Any, captures: dict[str, pa.Table], version: int,
                every_transaction_streamed: bool = False) -> list[str]:
    """A line per kind a capture should hold at least so many of and does not.
    ``every_transaction_streamed``: the server streams even small transactions (under the
    option sets that stream), so a kind counts with its streamed form (:data:`STREAMED`)."""
    problems = []
    counts = {name: count_kinds(c) for name, c in captures.items()}
    for (name, kind), at_least in sorted(getattr(workload, "expects", {}).items()):
        if name not in counts:
            continue  # an option set the server lacks (protocol 4 before PostgreSQL 16)
        have = counts[name][kind]
        if every_transaction_streamed and kind in STREAMED:
            have += counts[name][STREAMED[kind]]
        if have < at_least:
            problems.append(f"{name} capture: {have} {KINDS[kind]} ('{kind}') messages, {SHORT} {at_least}")
    return problems
