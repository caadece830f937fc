"""Server output settings drawn per seed (issue 21): the environment a user's server has.

:func:`draw` picks DateStyle (style and field order), IntervalStyle, TimeZone (half-hour,
negative and local-mean-time zones), extra_float_digits (down to -15), bytea_output,
lc_monetary and (PostgreSQL 16+) whether every transaction is streamed for a seed;
:func:`apply` writes them into the server's configuration and reloads, so that every
session, walsender and ``pg_logical_slot_*`` call prints under them.

What the oracle reads must not depend on them:

* :func:`pin` gives a session the output settings the package pins on its own connections
  (test_decoding's text and the final ``SELECT`` are printed by the calling session);
* :func:`capture_session` is how a capture is taken as the docs say (README "Capturing a
  stream with plain SQL"): DateStyle ISO, TimeZone UTC, extra_float_digits 3 and lc_monetary
  C pinned, so that floats are exact and the text of ranges and money equals the rendered
  binary; IntervalStyle and bytea_output stay the server's (decoded exactly in any of them).

The live stream sees every drawn setting: its connections must pin them themselves.
DateStyles and zone abbreviations in captures are covered by tests/test_server_settings.py
and crates/pgoutput-arrow/tests/styles.rs.
"""

from __future__ import annotations

import random
import subprocess
from typing import Any

from pgoutput_arrow._pg import OUTPUT_SETTINGS

__all__ = ["draw", "apply", "streams_every_transaction", "pin", "capture_session", "spark_settings",
           "database_encoding", "ENCODINGS", "CODECS"]

DATE_STYLES = ["ISO", "SQL", "German", "Postgres"]
DATE_ORDERS = ["MDY", "DMY", "YMD"]
INTERVAL_STYLES = ["postgres", "postgres_verbose", "sql_standard", "iso_8601"]
TIME_ZONES = ["UTC", "Asia/Kolkata", "America/St_Johns", "Africa/Abidjan", "America/New_York",
              "Pacific/Chatham", "Europe/Amsterdam", "Asia/Kathmandu", "America/Caracas"]
EXTRA_FLOAT_DIGITS = ["3", "2", "1", "0", "-4", "-15"]
BYTEA_OUTPUTS = ["hex", "escape"]


def _locales() -> list[str]:
    """lc_monetary values the server can take: C, POSIX and the machine's other locales."""
    try:
        found = subprocess.run(["locale", "-a"], capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.SubprocessError):
        found = []
    return sorted({"C", "POSIX", *found})


def draw(seed: int) -> dict[str, str]:
    """The settings of ``seed`` (the same for the same seed on the same machine), as
    postgresql.conf values."""
    rng = random.Random(f"settings-{seed}")
    return {
        "DateStyle": f"'{rng.choice(DATE_STYLES)}, {rng.choice(DATE_ORDERS)}'",
        "IntervalStyle": rng.choice(INTERVAL_STYLES),
        "TimeZone": f"'{rng.choice(TIME_ZONES)}'",
        "extra_float_digits": rng.choice(EXTRA_FLOAT_DIGITS),
        "bytea_output": rng.choice(BYTEA_OUTPUTS),
        "lc_monetary": f"'{rng.choice(_locales())}'",
        # PostgreSQL 16+: every transaction streamed, change by change, under the option sets
        # that stream ('buffered', the default, streams past logical_decoding_work_mem only).
        "debug_logical_replication_streaming": rng.choice(["buffered", "buffered", "immediate"]),
    }


#: Database encodings a seed's database may be made in: UTF8 most often; single-byte ones that
#: hold every character the generator writes (é, ß, €), whose text the server converts to the
#: client's encoding (the package's connections ask for UTF8).
ENCODINGS = ["UTF8", "UTF8", "WIN1252", "LATIN9"]
#: Python's codec of each: a logical message's content is bytes, sent as stored (in the
#: database's encoding), where test_decoding prints it as text (converted to the client's).
CODECS = {"UTF8": "utf-8", "WIN1252": "cp1252", "LATIN9": "iso8859_15"}


def database_encoding(seed: int) -> str:
    """The encoding ``seed``'s database is made in."""
    return random.Random(f"encoding-{seed}").choice(ENCODINGS)


def spark_settings(seed: int) -> dict[str, str]:
    """The Spark session's settings for ``seed``, as users set them: the time zone (a user's
    machine's, drawn apart from the server's), the rows of each Arrow batch handed to Python
    (Spark's default 10000, or few), and Arrow's large string and binary types."""
    rng = random.Random(f"spark-{seed}")
    return {
        "spark.sql.session.timeZone": rng.choice(TIME_ZONES),
        "spark.sql.execution.arrow.maxRecordsPerBatch": rng.choice(["10000", "977", "64"]),
        "spark.sql.execution.arrow.useLargeVarTypes": rng.choice(["false", "true"]),
    }


#: Settings a server before PostgreSQL 16 does not have.
SINCE_16 = ("debug_logical_replication_streaming",)


def apply(server: Any, settings: dict[str, str]) -> dict[str, str]:
    """Writes ``settings`` into ``server``'s configuration (a tests/pg_harness.PgServer) and
    reloads; returns those the server has (all but :data:`SINCE_16` before PostgreSQL 16)."""
    settings = {k: v for k, v in settings.items() if server.version >= 16 or k not in SINCE_16}
    server.configure(settings)
    return settings


def streams_every_transaction(settings: dict[str, str]) -> bool:
    """Whether the server applied ``settings`` streams every transaction (a small one too)."""
    return settings.get("debug_logical_replication_streaming") == "immediate"


def pin(cur: Any) -> None:
    """This session prints under the package's output settings (what its connections pin)."""
    for name, value in OUTPUT_SETTINGS.items():
        if name == "client_encoding":
            cur.connection.set_client_encoding(value)  # psycopg2 must know: it decodes the rows
        else:
            cur.execute("SELECT set_config(%s, %s, false)", (name, value))


def capture_session(cur: Any) -> None:
    """This session takes a capture as the docs say: the server's IntervalStyle and
    bytea_output, everything else pinned."""
    pin(cur)
    cur.execute("RESET IntervalStyle")
    cur.execute("RESET bytea_output")
