#!/usr/bin/env bash
# `make demo`: a throwaway database (from scripts/test-db.sh), orca migrate,
# orca register of examples/orca.toml, the scheduler for about a minute with
# pipelines firing, failing, retrying and succeeding, then `orca runs`.
# The builders pool runs on the local provider: its machines are process
# groups on this host, removed at the end. ORCA_DEMO_SECONDS changes how long
# the scheduler runs (default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
orca=${ORCA_BIN:-target/release/orca}
seconds=${ORCA_DEMO_SECONDS:-60}

admin=${ORCA_TEST_DATABASE_URL:?run through scripts/test-db.sh}
psql "$admin" -qc 'DROP DATABASE IF EXISTS orca_demo WITH (FORCE)' -c 'CREATE DATABASE orca_demo' >/dev/null
export ORCA_DATABASE_URL="${admin%/*}/orca_demo"

inbox=/tmp/orca-demo-inbox
rm -rf "$inbox"; mkdir -p "$inbox"
sched=""
# Local pool machines outlive a scheduler, as EC2 instances do: end this
# demo's (found by their stack label) when it is over.
end_machines() {
  local stack
  stack=$(psql "$ORCA_DATABASE_URL" -Atqc 'SELECT id FROM orca.stack' 2>/dev/null || true)
  [ -n "$stack" ] || return 0
  for env in /proc/[0-9]*/environ; do
    if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -qx "ORCA_LOCAL_LABELS=.*orca-stack=$stack"; then
      pid=${env#/proc/}; pid=${pid%/environ}
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
  done
}
cleanup() {
  [ -n "$sched" ] && kill -TERM "$sched" 2>/dev/null && wait "$sched" 2>/dev/null
  end_machines
  rm -rf "$inbox"
}
trap cleanup EXIT

echo "== orca migrate"; $orca migrate
echo "== orca check";   $orca check -c examples/orca.toml && echo "examples/orca.toml is fine"
echo "== orca register"; $orca register -c examples/orca.toml
echo "== orca run report --fill (three backfills)"
for day in 2026-11-01 2026-11-02 2026-11-03; do $orca run report --fill -- "$day"; done

echo "== orca scheduler, for ${seconds}s"
RUST_LOG=${RUST_LOG:-info} ORCA_POOL_SCALE_SECONDS=2 ORCA_POOL_GROW_AFTER=1 ORCA_POOL_TRY_SECONDS=3 \
  $orca scheduler &
sched=$!
half=$(( seconds / 2 ))
for ((i = 0; i < seconds; i++)); do
  sleep 1
  kill -0 "$sched" 2>/dev/null || { echo "the scheduler exited early" >&2; exit 1; }
  if [ "$i" = "$half" ]; then echo "== a file arrives for the sensor"; touch "$inbox/orders.csv"; fi
done
kill -TERM "$sched"; wait "$sched"; sched=""

echo "== orca pools"; $orca pools
echo "== orca runs"; $orca runs --limit 40
echo "== orca events (the last 25)"; $orca events --limit 25
