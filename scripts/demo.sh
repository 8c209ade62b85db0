#!/usr/bin/env bash
# `make demo`: a throwaway database (from scripts/test-db.sh), orca migrate,
# orca register of examples/orca.toml, then the scheduler for about a minute:
# pipelines firing, failing, retrying, timing out, a sensor, and the builders
# pool (local provider: its machines are process groups on this host)
# walking its types and locations, making a machine, running builds on it
# and, once the operator pauses build, removing it after idle_seconds.
# Then the wind-down an operator would do before the database goes: every
# pipeline paused, wait (with a deadline) until no run is running and the
# pool has no live machine, stop the scheduler, and the final `orca pools`
# and `orca runs`. Exit 1 when that final state isn't reached.
#
# ORCA_DEMO_SECONDS: how long the scheduler runs before the wind-down
# (default 60; longer, up to a minute more, until build has run on the
# pool's machine). ORCA_DEMO_DATABASE: the database it makes (orca_demo).
set -euo pipefail
cd "$(dirname "$0")/.."
orca=${ORCA_BIN:-target/release/orca}
seconds=${ORCA_DEMO_SECONDS:-60}
config=examples/orca.toml
dbname=${ORCA_DEMO_DATABASE:-orca_demo}
wind_down=90

admin=${ORCA_TEST_DATABASE_URL:?run through scripts/test-db.sh}
psql "$admin" -qc "DROP DATABASE IF EXISTS $dbname WITH (FORCE)" -c "CREATE DATABASE $dbname" >/dev/null
export ORCA_DATABASE_URL="${admin%/*}/$dbname"

# The sensor's folder (examples/orca.toml reads DEMO_INBOX): one of this
# demo's own, so two demos at once don't share it.
inbox=$(mktemp -d "${TMPDIR:-/tmp}/orca-demo-inbox.XXXXXX")
export DEMO_INBOX=$inbox
sched=""
tidy=""

# This demo's local pool machines still running (found by the stack label
# in their environment): pids of their process groups.
local_machines() {
  local stack env pid
  stack=$(psql "$ORCA_DATABASE_URL" -Atqc 'SELECT id FROM orca.stack' 2>/dev/null || true)
  [ -n "$stack" ] || return 0
  for env in /proc/[0-9]*/environ; do
    if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -qx "ORCA_LOCAL_LABELS=.*orca-stack=$stack"; then
      pid=${env#/proc/}; echo "${pid%/environ}"
    fi
  done
}
# Only when the demo failed: the wind-down ends them as an operator would.
cleanup() {
  [ -n "$sched" ] && kill -TERM "$sched" 2>/dev/null && wait "$sched" 2>/dev/null
  for pid in $(local_machines); do
    echo "demo: killing pool machine process group $pid left running" >&2
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  rm -rf "$inbox"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

fail() { echo "demo: $*" >&2; exit 1; }

# The scheduler's log (its pool machines' workers share its stderr), as an
# operator reads it: indented, the time of day first, the level only when
# it is not INFO; the database warnings `orca migrate` printed are not
# repeated.
tidy_log() {
  sed -u -E \
    -e '/^\[[^]]* WARN *\] .*\(docs\/security\.md\)$/d' \
    -e 's/^\[[0-9-]+T([0-9:]+)Z INFO *\] /  \1  /' \
    -e 's/^\[[0-9-]+T([0-9:]+)Z ([A-Z]+) *\] /  \1  \2: /'
}
indent() { sed 's/^/    /'; }

# Whether orca lists something: a run running, a pool machine.
# (Read whole first: `grep -q` may stop reading before orca is done.)
any_running() {
  local out
  out=$($orca runs --state running --limit 1000 --json) || fail "orca runs failed"
  grep -q '"id"' <<<"$out"
}
any_machine() {
  local out
  out=$($orca pools --json) || fail "orca pools failed"
  grep -q '"state"' <<<"$out"
}

echo "== orca migrate"; $orca migrate
echo "== orca check";   $orca check -c "$config" && echo "$config is fine"
echo "== orca register"; $orca register -c "$config"
echo "== orca run report --fill (three backfills)"
for day in 2026-11-01 2026-11-02 2026-11-03; do $orca run report --fill -- "$day"; done

echo "== orca scheduler, for ${seconds} s: pipelines fire, fail, retry and time out (its log below)."
echo "   build's runs need a machine of pool builders, which has none: the pool grows, trying type"
echo "   big first, but rack-a has room for no machine and rack-b none of type big, so after big's"
echo "   wait (10 s) it moves to small, which rack-b has room for"
exec {logfd}> >(tidy_log)
tidy=$!
RUST_LOG=${RUST_LOG:-info} ORCA_POOL_SCALE_SECONDS=2 ORCA_POOL_GROW_AFTER=1 ORCA_POOL_TRY_SECONDS=3 \
  $orca scheduler 2>&"$logfd" &
sched=$!

half=$(( seconds / 2 ))
paused=""
# At least $seconds; then, until build has run on the pool's machine (at
# most a minute more).
for ((i = 1; i <= seconds || (!${#paused} && i <= seconds + 60); i++)); do
  sleep 1
  kill -0 "$sched" 2>/dev/null || fail "the scheduler exited early"
  if [ "$i" = "$half" ]; then echo "== a file arrives for the sensor"; touch "$inbox/orders.csv"; fi
  if [ -z "$paused" ]; then
    built=$($orca runs --pipeline build --state succeeded --limit 1 --json | grep -o '"id": *[0-9]*' | grep -o '[0-9]*$' || true)
    if [ -n "$built" ]; then
      echo "== build ran on the pool's machine (orca events --run $built)"
      $orca events --run "$built" | indent
      echo "== the operator pauses build (orca pause build): the pool has no demand now, so its machine"
      echo "   is removed once it has run nothing for the pool's idle_seconds (20 s)"
      $orca pause build | indent
      paused=1
    fi
  fi
done
[ -n "$paused" ] || fail "build never ran on a machine of pool builders"

echo "== wind-down, as an operator would before the database goes: pause every pipeline, wait until"
echo "   no run is running and the pool has no machine (at most ${wind_down} s), then stop the scheduler"
for p in $(sed -n 's/^\[pipelines\.\([^].]*\)\]$/\1/p' "$config"); do
  [ "$p" = build ] || $orca pause "$p" | indent
done
for ((i = 0; ; i++)); do
  if ! any_running && ! any_machine; then
    echo "   after ${i} s: no run running, no pool machine"
    break
  fi
  [ "$i" -lt "$wind_down" ] || fail "after ${wind_down} s a run is still running or a pool machine is live"
  sleep 1
done
kill -TERM "$sched"; wait "$sched" || fail "the scheduler exited with $?"; sched=""
# Its log ends once nothing holds it open (no machine is left to).
exec {logfd}>&-
for ((i = 0; i < 50 && ${#tidy}; i++)); do kill -0 "$tidy" 2>/dev/null || break; sleep 0.1; done

echo "== what the builders pool's scaler decided (orca events)"
$orca events --limit 1000 | grep -E 'no capacity|type skipped|machine made|machine removed|paused' | indent || true
echo "== orca pools"; $orca pools
echo "== orca runs"; $orca runs --limit 40

# The final state: nothing running, no machine (in orca's rows nor on
# this host).
! any_running || fail "a run is still running"
! any_machine || fail "a pool machine is still live"
[ -z "$(local_machines)" ] || fail "a pool machine's processes are still running"
echo "== done: no run running, no live machine"
