#!/usr/bin/env bash
# Runs a command with a Postgres to test against:
#
#   scripts/test-db.sh CMD [ARG...]
#
# CMD gets ORCA_TEST_DATABASE_URL (a superuser URL; each test makes a database
# of its own in it) and ORCA_PG_BINDIR (the server binaries, for tests that
# run a cluster of their own). The database is, in this order:
#   1. ORCA_TEST_DATABASE_URL, if set;
#   2. a server answering on localhost:5432 that lets user postgres in;
#   3. a throwaway cluster made with initdb under target/pg/PID on a port of
#      its own (as the postgres user when run as root), stopped and removed
#      afterwards; several can run at once.
# With no Postgres server binaries: one line naming the package, exit 2.
set -euo pipefail
cd "$(dirname "$0")/.."

bindir=""
for d in "${ORCA_PG_BINDIR:-}" $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r) \
         "$(pg_config --bindir 2>/dev/null || true)"; do
  if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then bindir=$d; break; fi
done

if [ -z "${ORCA_TEST_DATABASE_URL:-}" ] && command -v psql >/dev/null 2>&1 &&
   psql "postgres://postgres@localhost:5432/postgres" -Atqc 'select 1' >/dev/null 2>&1; then
  export ORCA_TEST_DATABASE_URL="postgres://postgres@localhost:5432/postgres"
fi

if [ -n "${ORCA_TEST_DATABASE_URL:-}" ]; then
  [ -n "$bindir" ] && export ORCA_PG_BINDIR="$bindir"
  exec "$@"
fi

if [ -z "$bindir" ]; then
  echo "test-db.sh: no PostgreSQL server binaries (initdb, pg_ctl) found: install the 'postgresql' package (apt-get install postgresql)" >&2
  exit 2
fi
export ORCA_PG_BINDIR="$bindir"

as_pg=()
if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); fi

root="$PWD/target/pg/$$"
data="$root/data"
mkdir -p "$root"
if [ "$(id -u)" = 0 ]; then
  chown postgres "$root"
  chmod o+x "$PWD" "$PWD/target" "$PWD/target/pg" 2>/dev/null || true
fi

# A port no one listens on.
port=${ORCA_TEST_PG_PORT:-}
if [ -z "$port" ]; then
  for p in $(seq 54321 54399); do
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && ! ls /tmp/.s.PGSQL.$p target/pg/*/.s.PGSQL.$p >/dev/null 2>&1; then
      port=$p; break
    fi
  done
fi

stop() {
  "${as_pg[@]}" "$bindir/pg_ctl" -D "$data" -m immediate stop >/dev/null 2>&1 || true
}
cleanup() {
  stop
  if [ -n "${ORCA_KEEP_TEST_DB:-}" ]; then echo "test-db.sh: kept $root" >&2; else rm -rf "$root"; fi
}

# Passwords are checked over TCP (scram-sha-256), as in production: pool
# machines log in with credentials of their own.
echo orca-test >"$root/pw"
[ "$(id -u)" = 0 ] && chown postgres "$root/pw"
"${as_pg[@]}" "$bindir/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
  --pwfile="$root/pw" -E UTF8 --no-sync >"$root/initdb.log" 2>&1 ||
  { echo "test-db.sh: initdb failed:" >&2; tail -5 "$root/initdb.log" >&2; rm -rf "$root"; exit 1; }
cat >>"$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$root'
max_connections = 400
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
trap cleanup EXIT
"${as_pg[@]}" "$bindir/pg_ctl" -D "$data" -l "$root/server.log" -w -t 60 start >/dev/null ||
  { echo "test-db.sh: the throwaway cluster did not start:" >&2; tail -5 "$root/server.log" >&2; exit 1; }
export ORCA_TEST_DATABASE_URL="postgres://postgres:orca-test@127.0.0.1:$port/postgres"
"$@"
