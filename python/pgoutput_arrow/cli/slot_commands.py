"""``pgoutput-dump --dsn ... --slot-status`` and ``--drop-slot``: the slot guard, for cron
and monitoring. The status is a table, or one JSON object per slot (``--format jsonl``);
the exit status is 3 when a slot is invalidated or retains more WAL than
``--max-retained-wal``."""

from __future__ import annotations

import argparse
import json
from typing import IO

from ..live.slot_guard import SlotStatus, drop_slot, slot_status
from .arguments import UsageError
from .progress import nbytes

__all__ = ["is_slot_command", "run_slot_command", "EXIT_SLOT_ALARM"]

#: The exit status when a slot is invalidated or past --max-retained-wal.
EXIT_SLOT_ALARM = 3


def is_slot_command(args: argparse.Namespace) -> bool:
    return bool(args.slot_status or args.drop_slot)


def run_slot_command(args: argparse.Namespace, out: IO[str]) -> int:
    if args.dsn is None:
        raise UsageError("--slot-status and --drop-slot need --dsn")
    if args.input is not None:
        raise UsageError("--slot-status and --drop-slot take no CAPTURE")
    if args.slot_status and args.drop_slot:
        raise UsageError("give --slot-status or --drop-slot, not both")
    if args.max_retained_wal is not None and not args.slot_status:
        raise UsageError("--max-retained-wal goes with --slot-status")
    if args.drop_slot:
        if not args.slot:
            raise UsageError("--drop-slot needs --slot NAME")
        drop_slot(args.dsn, args.slot, args.connect_timeout)
        out.write(f'dropped replication slot "{args.slot}"\n')
        return 0
    fmt = args.format or ("pretty" if out.isatty() else "jsonl")
    if fmt not in ("pretty", "jsonl"):
        raise UsageError("--slot-status prints --format pretty (a table) or jsonl")
    slots = slot_status(args.dsn, args.slot, args.connect_timeout)
    alarms = {s.slot_name: alarm(s, args.max_retained_wal) for s in slots}
    if fmt == "jsonl":
        for s in slots:
            out.write(json.dumps({**s.as_dict(), "alarm": alarms[s.slot_name]}) + "\n")
    else:
        out.write(table(slots, alarms))
    out.flush()
    return EXIT_SLOT_ALARM if any(alarms.values()) else 0


def alarm(s: SlotStatus, max_retained: int | None) -> str | None:
    """Why this slot needs attention, or None."""
    if s.invalidated:
        return f"invalidated ({s.invalidation_reason or 'wal_status lost'}): its changes are lost"
    if max_retained is not None and s.retained_wal_bytes > max_retained:
        return f"retains {nbytes(s.retained_wal_bytes)} of WAL (more than {nbytes(max_retained)})"
    return None


def table(slots: list[SlotStatus], alarms: dict[str, str | None]) -> str:
    """Aligned columns, one slot a line; a dash where the server has no value."""
    head = ["slot", "database", "active", "wal_status", "lag", "retained", "safe_wal_size",
            "invalidation_reason", "inactive_since", "failover", "alarm"]

    def cell(value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, bool):
            return "yes" if value else "no"
        return str(value)

    rows = [[s.slot_name, s.database, cell(s.active), cell(s.wal_status), nbytes(s.lag_bytes),
             nbytes(s.retained_wal_bytes),
             nbytes(s.safe_wal_size) if s.safe_wal_size is not None else "-",
             cell(s.invalidation_reason), cell(s.inactive_since),
             cell(s.failover) + (" (synced)" if s.synced else ""), cell(alarms[s.slot_name])]
            for s in slots]
    if not rows:
        return "no logical replication slots\n"
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n"
                   for r in [head, *rows])
