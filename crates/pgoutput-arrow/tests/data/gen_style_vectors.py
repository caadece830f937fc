#!/usr/bin/env python3
"""Write style_vectors.json: dates, timestamps, timestamptz and intervals (and arrays of them)
as a real PostgreSQL 18 prints them under every DateStyle (ISO, SQL, German, Postgres), every
field order (MDY, DMY, YMD), several TimeZones (half-hour, negative, historical local mean
time offsets) and every IntervalStyle, each beside the value's binary send format, which
does not depend on any setting.

    python3 crates/pgoutput-arrow/tests/data/gen_style_vectors.py     # needs psycopg2

tests/styles.rs decodes each text with the group's date order and time zone and checks it
gives the same Arrow value as the send format.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
sys.path.insert(0, str(ROOT / "tests"))

from pg_harness import PgServer  # noqa: E402

DATES = ["2026-11-25", "2026-01-02", "2026-12-31", "2000-02-29", "1970-01-01", "0001-01-01",
         "0044-03-15 BC", "4713-01-01 BC", "10000-01-01", "5874897-12-31", "infinity", "-infinity"]

# As instants (+00), so that they are the same values under every TimeZone.
STAMPS = ["2026-11-25 10:00:00", "2026-01-02 03:04:05.123456", "2000-01-01 00:00:00.5",
          "1969-12-31 23:59:59.000001", "0001-01-01 00:00:00", "0044-03-15 12:00:00 BC",
          "10000-01-01 00:00:00", "1850-06-01 12:00:00", "1900-01-01 00:00:00",
          "2024-11-03 05:30:00", "2024-11-03 06:30:00", "2024-03-10 07:30:00",
          "2026-07-01 12:34:56.7", "infinity", "-infinity"]

INTERVALS = ["1 year 2 mons 3 days 04:05:06.789", "-1 year -2 mons +3 days -04:05:06", "0",
             "-00:00:01", "1 day", "-1 days", "2 mons", "-2 mons", "3 days 04:00:00",
             "-3 days -04:00:00", "1 year", "00:00:00.000001", "-00:00:00.5", "1 mon -1 day",
             "-1 mon +1 day", "1 day -00:00:01", "100:00:00", "-1 year", "1 year 1 day",
             "01:00:00", "00:01:00", "00:00:01", "-00:01:00", "2 years 00:00:07",
             "2562047788:00:54.775807",
             "=interval '-2562047788:00:54.775807' - interval '1 microsecond'", "178956970 years 7 mons",
             "-178956970 years -8 mons", "2147483647 days", "-2147483648 days", "infinity",
             "-infinity"]

DATE_STYLES = ["ISO", "SQL", "German", "Postgres"]
ORDERS = ["MDY", "DMY", "YMD"]
ZONES = ["UTC", "America/New_York", "Asia/Kolkata", "America/St_Johns", "Africa/Abidjan",
         "Europe/Amsterdam", "Pacific/Chatham", "Asia/Istanbul"]
INTERVAL_STYLES = ["postgres", "postgres_verbose", "sql_standard", "iso_8601"]


def load(cur, table: str, sql_type: str, literals: list[str], suffix: str = "") -> None:
    """The values into a temporary table, read under the default settings (ISO, MDY,
    postgres, UTC): every group then prints the same values."""
    cur.execute(f"CREATE TEMP TABLE {table} (n int, v {sql_type})")
    for n, lit in enumerate(literals):
        if lit.startswith("="):  # an SQL expression
            cur.execute(f"INSERT INTO {table} VALUES (%s, {lit[1:]})", (n,))
            continue
        if suffix and lit not in ("infinity", "-infinity"):
            lit = lit[:-3] + suffix + " BC" if lit.endswith(" BC") else lit + suffix
        cur.execute(f"INSERT INTO {table} VALUES (%s, %s::{sql_type})", (n, lit))


def rows(cur, table: str, send: str) -> list[dict]:
    cur.execute(f"SELECT v::text, encode({send}(v), 'hex') FROM {table} ORDER BY n")
    out = [{"text": t, "binary": b} for t, b in cur.fetchall()]
    cur.execute(f"SELECT a::text, encode(array_send(a), 'hex') FROM "
                f"(SELECT array_agg(v ORDER BY n) AS a FROM {table}) s")
    t, b = cur.fetchone()
    return out + [{"text": t, "binary": b, "array": True}]


def main() -> None:
    groups = []
    with PgServer(version=18) as pg:
        conn = pg.connect()
        cur = conn.cursor()
        cur.execute("SET DateStyle = 'ISO, MDY'; SET IntervalStyle = 'postgres'; SET TimeZone = 'UTC'")
        load(cur, "d", "date", DATES)
        load(cur, "ts", "timestamp", STAMPS)
        load(cur, "tstz", "timestamptz", STAMPS, "+00")
        load(cur, "i", "interval", INTERVALS)
        for style in DATE_STYLES:
            for order in ORDERS:
                cur.execute(f"SET DateStyle = '{style}, {order}'")
                for zone in ZONES:
                    cur.execute("SET TimeZone = %s", (zone,))
                    groups.append({"DateStyle": f"{style}, {order}", "TimeZone": zone,
                                   "date_order": order, "type": "timestamptz",
                                   "values": rows(cur, "tstz", "timestamptz_send")})
                cur.execute("SET TimeZone = 'UTC'")
                for typ, table in (("date", "d"), ("timestamp", "ts")):
                    groups.append({"DateStyle": f"{style}, {order}", "TimeZone": "UTC",
                                   "date_order": order, "type": typ,
                                   "values": rows(cur, table, f"{typ}_send")})
        cur.execute("SET DateStyle = 'ISO, MDY'")
        for istyle in INTERVAL_STYLES:
            cur.execute(f"SET IntervalStyle = '{istyle}'")
            groups.append({"IntervalStyle": istyle, "type": "interval",
                           "values": rows(cur, "i", "interval_send")})
        version = pg.scalar("SHOW server_version")
    out = HERE / "style_vectors.json"
    out.write_text(json.dumps({"server": version, "groups": groups}, indent=0) + "\n")
    print(f"wrote {out}: {len(groups)} groups")


if __name__ == "__main__":
    main()
