"""The one clock: UTC, to the second, as every record and ledger entry writes it."""

from __future__ import annotations

from datetime import date, datetime, timezone


def now_utc() -> str:
    """Now, as an ISO 8601 UTC timestamp to the second (`2026-11-30T09:14:02+00:00`)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def today_utc() -> date:
    """Today's date in UTC (waiver expiry is a UTC date)."""
    return datetime.now(timezone.utc).date()
