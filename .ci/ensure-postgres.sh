#!/usr/bin/env bash
# PostgreSQL's server binaries (the Debian package) and psycopg in .venv, for the tests that start their
# own server with initdb/pg_ctl on 127.0.0.1 (tests/support/postgres.py). Does nothing when both are there;
# when the install fails those tests skip, saying so.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
    || echo "PostgreSQL could not be installed: its tests will skip, saying so"
fi
if [ -x .venv/bin/python ]; then
  .venv/bin/python -c 'import psycopg' 2>/dev/null || .venv/bin/python -m pip install --quiet 'psycopg[binary]>=3.1'
fi
exit 0
