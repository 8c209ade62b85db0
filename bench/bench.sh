#!/usr/bin/env bash
# orca's figures: tick cost against finished history, the tick's query plans,
# runs started per second, the scheduler's peak RSS, the binary's size,
# `orca check` of files at the size limit, and the leaderless gaps of scheduler overlap (deploy handover, crash, hang),
# and pools: a scaler pass, claims per second against pgbench, a worker's RSS;
# the fleet churn (tests/chaos/churn.rs: ORCA_BENCH_CHURN machines, 1000).
#
#   scripts/test-db.sh bench/bench.sh
#
# Needs ORCA_TEST_DATABASE_URL (a superuser URL ending in /postgres; test-db.sh
# sets it) and the release binary (target/release/orca, or ORCA_BIN). Prints
# `name: value` lines under `== heading ==` lines on stdout; figures, not
# pass/fail (a goal is named next to the figure it applies to). Progress and
# problems go to stderr. Makes databases orca_bench, orca_bench_small,
# orca_bench_rate and orca_bench_overlap, and drops them at exit
# (ORCA_BENCH_KEEP=1 keeps them).
#
# Knobs: ORCA_BENCH_TICK_SECONDS (20): how long each tick measurement runs;
# ORCA_BENCH_FINISHED (1000000): finished runs in the big database;
# ORCA_BENCH_OVERLAP_REPS (5): repetitions of each overlap figure.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${ORCA_TEST_DATABASE_URL:?run as scripts/test-db.sh bench/bench.sh}"
ORCA_BIN=${ORCA_BIN:-target/release/orca}
PSQL=${PSQL:-/usr/bin/psql}
measure_s=${ORCA_BENCH_TICK_SECONDS:-20}
big_n=${ORCA_BENCH_FINISHED:-1000000}
small_n=10000
queued_n=10000
rate_n=2000

if [ ! -x "$ORCA_BIN" ]; then
  echo "bench: no orca binary at $ORCA_BIN: build it first (cargo build --release) or set ORCA_BIN" >&2
  exit 2
fi
ORCA_BIN=$(cd "$(dirname "$ORCA_BIN")" && pwd)/$(basename "$ORCA_BIN")
orca_exe=$(readlink -f "$ORCA_BIN")  # what /proc/PID/exe of the scheduler shows
command -v "$PSQL" >/dev/null || { echo "bench: no psql at $PSQL" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/orca-bench.XXXXXX")
sched_pids=""   # schedulers this script started and has not seen exit
stopped_pids="" # those of them it has SIGSTOPped and not yet SIGCONTed
made_dbs=""     # databases this script made

log() { echo "bench: $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }

# The URL of database $1 on the test server: ORCA_TEST_DATABASE_URL with its
# database name (the last path part) replaced, query string kept.
db_url() {
  local url=$ORCA_TEST_DATABASE_URL base query=""
  base=${url%%\?*}
  if [[ $url == *\?* ]]; then query="?${url#*\?}"; fi
  printf '%s/%s%s' "${base%/*}" "$1" "$query"
}

# psql against URL $1 with the rest as arguments: no psqlrc, stop on the first
# error, unaligned tuples only, every statement bounded.
sql() {
  local url=$1
  shift
  PGCONNECT_TIMEOUT=10 PGOPTIONS="-c statement_timeout=150s -c client_min_messages=warning" \
    "$PSQL" "$url" -X -q -A -t -v ON_ERROR_STOP=1 "$@"
}

# A process is gone once it has no /proc entry or is a zombie.
alive() {
  local st=""
  [ -r "/proc/$1/stat" ] || return 1
  read -r _ _ st _ <"/proc/$1/stat" 2>/dev/null || return 1
  [ "$st" != Z ] && [ "$st" != X ]
}

# Waits up to $2 seconds for process $1 to be gone.
wait_gone() {
  local pid=$1 deadline
  deadline=$(awk -v t="$(now)" -v s="$2" 'BEGIN { printf "%.3f", t + s }')
  while alive "$pid"; do
    if awk -v t="$(now)" -v d="$deadline" 'BEGIN { exit !(t >= d) }'; then return 1; fi
    sleep 0.1
  done
}

forget_pid() {
  local p out=""
  for p in $sched_pids; do [ "$p" = "$1" ] || out="$out $p"; done
  sched_pids=$out
}

# Stops scheduler $1: SIGTERM, up to $2 s for it to exit, then SIGKILL to it
# and to the process groups of the runs it had started (each run is the
# leader of a group of its own). Returns its exit code (137 if killed).
stop_sched() {
  local pid=$1 limit=$2 kids rc=0 k
  kids=$(ps -o pid= --ppid "$pid" 2>/dev/null | tr -d ' ' || true)
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" "$limit"; then
      log "scheduler $pid still running ${limit}s after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$pid" 5 || true
      for k in $kids; do kill -KILL -- "-$k" 2>/dev/null || true; done
      rc=137
    fi
  fi
  if [ "$rc" = 0 ]; then wait "$pid" 2>/dev/null || rc=$?; else wait "$pid" 2>/dev/null || true; fi
  forget_pid "$pid"
  return "$rc"
}

drop_db() {
  sql "$ORCA_TEST_DATABASE_URL" -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null
}

cleanup() {
  local rc=$? p d
  trap - EXIT INT TERM
  # A stopped process acts on no signal but SIGKILL (SIGTERM would wait for a
  # SIGCONT): wake it, and kill it, hung as it is.
  for p in $stopped_pids; do
    kill -CONT "$p" 2>/dev/null || true
    kill -KILL "$p" 2>/dev/null || true
  done
  for p in $sched_pids; do
    kill -CONT "$p" 2>/dev/null || true
    stop_sched "$p" 5 >/dev/null 2>&1 || true
  done
  if [ "${ORCA_BENCH_KEEP:-0}" != 1 ]; then
    for d in $made_dbs; do drop_db "$d" 2>/dev/null || log "could not drop database $d"; done
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A fresh database $1 with orca's schema and config file $2 registered.
fresh_db() {
  local name=$1 config=$2 url
  url=$(db_url "$name")
  drop_db "$name"
  case " $made_dbs " in *" $name "*) ;; *) made_dbs="$made_dbs $name" ;; esac
  sql "$ORCA_TEST_DATABASE_URL" -c "CREATE DATABASE $name" >/dev/null
  ORCA_DATABASE_URL=$url "$ORCA_BIN" migrate >"$tmp/migrate-$name.log" 2>&1 ||
    { cat "$tmp/migrate-$name.log" >&2; return 1; }
  ORCA_DATABASE_URL=$url "$ORCA_BIN" register -c "$config" >"$tmp/register-$name.log" 2>&1 ||
    { cat "$tmp/register-$name.log" >&2; return 1; }
}

# Starts the scheduler against URL $1 with tick $2 s, stats to file $3, its
# log to file $4; sets SCHED_PID to the scheduler process itself. A stop grace
# of 2 s (not 30) so stopping is quick; a stale limit of 2 s (not 10) so the
# sweep, which is skipped for one stale limit after taking the lead, is part
# of nearly every measured tick.
start_sched() {
  ORCA_DATABASE_URL=$1 ORCA_TICK_SECONDS=$2 ORCA_TICK_STATS=$3 \
    ORCA_STOP_GRACE_SECONDS=2 ORCA_STALE_SECONDS=2 \
    "$ORCA_BIN" scheduler >"$4" 2>&1 &
  SCHED_PID=$!
  sched_pids="$sched_pids $SCHED_PID"
  is_sched "$SCHED_PID"
}

# $! is the orca process itself (bash execs a simple background command in
# the child it forks), not a shell or a run: check, once the child has
# exec'd, that process $1 is the scheduler, so VmHWM is read (and signals go
# to) the right process.
is_sched() {
  local pid=$1 i exe argv1
  for i in $(seq 1 50); do
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
    argv1=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | sed -n 2p || true)
    if [ "$exe" = "$orca_exe" ] && [ "$argv1" = scheduler ]; then return 0; fi
    alive "$pid" || return 0  # exited at once: the caller sees it gone
    sleep 0.05
  done
  log "pid $pid is not the orca scheduler (exe $exe, argv[1] $argv1)"
  return 1
}

# Peak resident set (VmHWM) of process $1, in MiB.
peak_rss_mib() {
  local kb
  kb=$(awk '/^VmHWM:/ { print $2 }' "/proc/$1/status" 2>/dev/null || true)
  if [ -n "$kb" ]; then awk -v k="$kb" 'BEGIN { printf "%.2f", k / 1024 }'; else echo "n/a"; fi
}

# Field $1 of the line the scheduler writes to ORCA_TICK_STATS (file $2).
stat_field() {
  sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" "$2" 2>/dev/null | head -n 1
}

# --------------------------------------------------------------------- setup
pipelines_config() {  # the ~20 pipeline config of the tick measurement
  {
    printf '[pipelines.busy]\ncommand = "sleep 600"\nmax_runs = 4\n\n'
    local i
    for i in $(seq -w 1 19); do
      printf '[pipelines.p%s]\ncommand = ["true"]\nmax_runs = 2\n\n' "$i"
    done
  } >"$1"
}
pipelines_config "$tmp/tick.toml"
printf '[pipelines.t]\ncommand = ["true"]\nmax_runs = 64\n' >"$tmp/rate.toml"

# Finished runs spread over the pipelines (one in ten failed), ended in the
# past, and the queued runs of `busy`.
load_runs() {  # url finished_count
  sql "$1" <<SQL
INSERT INTO orca.runs (pipeline, state, start, origin, queued_at, not_before,
                       started_at, ended_at, host, exit_code, why)
SELECT p.names[1 + g % array_length(p.names, 1)],
       CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'succeeded' END,
       1, 'manual',
       now() - interval '60 days' + g * interval '3 seconds',
       now() - interval '60 days' + g * interval '3 seconds',
       now() - interval '60 days' + g * interval '3 seconds' + interval '1 second',
       now() - interval '60 days' + g * interval '3 seconds' + interval '2 seconds',
       'bench', CASE WHEN g % 10 = 0 THEN 1 ELSE 0 END,
       CASE WHEN g % 10 = 0 THEN 'exit code 1 after 1.0s' ELSE 'exit code 0 after 1.0s' END
FROM generate_series(1, $2) g,
     (SELECT array_agg(name ORDER BY name) AS names FROM orca.pipelines) p;
INSERT INTO orca.runs (pipeline) SELECT 'busy' FROM generate_series(1, $queued_n);
SQL
  # VACUUM too, not just ANALYZE: autovacuum would otherwise pass over the new
  # rows during a measurement (and the visibility map is set, as in a table
  # that has lived a while).
  sql "$1" -c "VACUUM (ANALYZE) orca.runs" -c "VACUUM (ANALYZE) orca.pipelines"
}

echo "== setup =="
echo "cpus: $(nproc)"
echo "postgres: $(sql "$ORCA_TEST_DATABASE_URL" -c 'SHOW server_version' | awk '{ print $1 }')"
echo "orca binary: $ORCA_BIN"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

url_big=$(db_url orca_bench)
url_small=$(db_url orca_bench_small)
url_rate=$(db_url orca_bench_rate)

log "making orca_bench_small ($small_n finished runs)"
fresh_db orca_bench_small "$tmp/tick.toml"
load_runs "$url_small" "$small_n"
log "making orca_bench ($big_n finished runs)"
fresh_db orca_bench "$tmp/tick.toml"
t0=$(now)
load_runs "$url_big" "$big_n"
echo "load + vacuum $big_n finished runs s: $(since "$t0")"
echo "orca.runs size MiB (1M finished, with indexes): $(mib "$(sql "$url_big" -c "SELECT pg_total_relation_size('orca.runs')")")"

# ----------------------------------------------------------------- tick cost
# Runs the scheduler against $1 for measure_s seconds: 4 runs of `busy`
# running, the rest queued. Leaves key=value lines in $tmp/tick-$2.
measure_ticks() {
  local url=$1 tag=$2 t0 rss running queued rc=0
  local stats="$tmp/stats-$tag" out="$tmp/tick-$tag" slog="$tmp/sched-$tag.log"
  log "tick measurement on $tag finished runs: ${measure_s}s"
  start_sched "$url" 0.1 "$stats" "$slog"
  t0=$(now)
  while awk -v e="$(since "$t0")" -v m="$measure_s" 'BEGIN { exit !(e < m) }'; do
    if ! alive "$SCHED_PID"; then
      log "the scheduler exited early; its log:"
      tail -n 20 "$slog" >&2
      break
    fi
    sleep 0.5
  done
  rss=$(peak_rss_mib "$SCHED_PID")
  running=$(sql "$url" -c "SELECT count(*) FROM orca.runs WHERE state = 'running'")
  queued=$(sql "$url" -c "SELECT count(*) FROM orca.runs WHERE state = 'queued'")
  stop_sched "$SCHED_PID" 30 || rc=$?
  {
    echo "rss=$rss"
    echo "running=$running"
    echo "queued=$queued"
    echo "exit=$rc"
    if [ -s "$stats" ]; then cat "$stats"; else echo "nostats=1"; fi
  } | tr '\n' ' ' >"$out"
  if [ ! -s "$stats" ]; then
    log "no ORCA_TICK_STATS line from the scheduler on $tag (exit $rc); its log:"
    tail -n 20 "$slog" >&2
  fi
}
measure_ticks "$url_small" small
measure_ticks "$url_big" big

show() {  # label field [goal]
  local label=$1 field=$2 goal=${3:+ ($3)} s b
  s=$(stat_field "$field" "$tmp/tick-small")
  b=$(stat_field "$field" "$tmp/tick-big")
  echo "$label, 10k finished$goal: ${s:-n/a}"
  echo "$label, 1M finished$goal: ${b:-n/a}"
}
echo
echo "== tick cost: $queued_n queued, 4 running, tick 0.1 s for ${measure_s} s =="
show "ticks" ticks
show "tick p50 ms" p50_ms
show "tick p99 ms" p99_ms "goal <= 50"
show "tick max ms" max_ms
show "statements per tick" statements_per_tick
show "runs running at stop" running
show "runs queued at stop" queued
show "scheduler exit code" exit
s50=$(stat_field p50_ms "$tmp/tick-small")
b50=$(stat_field p50_ms "$tmp/tick-big")
if [ -n "$s50" ] && [ -n "$b50" ]; then
  echo "tick p50 ratio 1M/10k finished: $(awk -v s="$s50" -v b="$b50" 'BEGIN { if (s > 0) printf "%.2f", b / s; else print "n/a" }')"
fi

# --------------------------------------------------------------- query plans
# EXPLAIN (ANALYZE, BUFFERS) of one of the tick's statements on the 1M-row
# database: PREPARE the file as it is, EXECUTE it with the parameters given.
explain() {  # label file params [wrap: 1 = inside BEGIN/ROLLBACK]
  local label=$1 file=$2 params=$3 wrap=${4:-0} plan="$tmp/plan-$1"
  {
    [ "$wrap" = 1 ] && echo "BEGIN;"
    printf 'PREPARE bench_stmt AS\n%s\n;\n' "$(cat "$file")"
    if [ -n "$params" ]; then
      echo "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE bench_stmt($params);"
    else
      echo "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE bench_stmt;"
    fi
    [ "$wrap" = 1 ] && echo "ROLLBACK;"
    echo "DEALLOCATE bench_stmt;"
  } >"$tmp/explain-$label.sql"
  if ! sql "$url_big" -f "$tmp/explain-$label.sql" >"$plan" 2>"$plan.err"; then
    echo "$label: EXPLAIN failed: $(head -n 1 "$plan.err")"
    return 0
  fi
  echo "$label execution ms: $(sed -n 's/.*Execution Time: \([0-9.]*\) ms.*/\1/p' "$plan")"
  echo "$label buffers (top node): $(grep -m 1 'Buffers:' "$plan" | sed 's/^ *Buffers: //' || true)"
  # Which indexes (and scans) it uses, and how many rows a filter threw away.
  { grep -E 'Index|Seq Scan|Heap Scan|Rows Removed by Filter' "$plan" | grep -v 'Index Cond:' || true; } |
    sed -e 's/^ *//' -e 's/^-> *//' -e 's/actual time=[0-9.]*\.\.[0-9.]* //' |
    while IFS= read -r line; do echo "$label plan: $line"; done
}
echo
echo "== query plans ($big_n finished, $queued_n queued) =="
explain startable sql/startable.sql "'local', 64"
explain sweep sql/sweep.sql "10, '{}'" 1
explain tick_pipelines sql/tick_pipelines.sql ""

# -------------------------------------------------------- runs started per s
log "runs per second: $rate_n runs of ['true'], max_runs 64"
fresh_db orca_bench_rate "$tmp/rate.toml"
sql "$url_rate" -c "INSERT INTO orca.runs (pipeline) SELECT 't' FROM generate_series(1, $rate_n); ANALYZE orca.runs;"
start_sched "$url_rate" 0.05 "$tmp/stats-rate" "$tmp/sched-rate.log"
t0=$(now)
done_n=0
took=""
while :; do
  done_n=$(sql "$url_rate" -c "SELECT count(*) FROM orca.runs WHERE state = 'succeeded'" || echo 0)
  if [ "$done_n" -ge "$rate_n" ]; then took=$(since "$t0"); break; fi
  if ! alive "$SCHED_PID"; then log "the scheduler exited early; its log:"; tail -n 20 "$tmp/sched-rate.log" >&2; break; fi
  if awk -v e="$(since "$t0")" 'BEGIN { exit !(e >= 120) }'; then log "deadline: $done_n of $rate_n succeeded after 120 s"; break; fi
  sleep 0.2
done
rate_rss=$(peak_rss_mib "$SCHED_PID")
rate_failed=$(sql "$url_rate" -c "SELECT count(*) FROM orca.runs WHERE state <> 'succeeded'")
rate_exit=0
stop_sched "$SCHED_PID" 30 || rate_exit=$?
echo
echo "== runs started per second: $rate_n runs of [\"true\"], max_runs 64, tick 0.05 s =="
if [ -n "$took" ]; then
  echo "time to $rate_n succeeded s: $took"
  echo "runs per second: $(awk -v n="$rate_n" -v t="$took" 'BEGIN { printf "%.0f", n / t }')"
else
  echo "time to $rate_n succeeded s: n/a ($done_n succeeded before the deadline)"
  echo "runs per second: n/a"
fi
echo "runs not succeeded: $rate_failed"
echo "ticks: $(stat_field ticks "$tmp/stats-rate")"
echo "tick p50 ms: $(stat_field p50_ms "$tmp/stats-rate")"
echo "tick p99 ms: $(stat_field p99_ms "$tmp/stats-rate")"
echo "statements per tick: $(stat_field statements_per_tick "$tmp/stats-rate")"
echo "scheduler exit code: $rate_exit"

# ------------------------------------------------------------------- memory
echo
echo "== scheduler peak RSS (VmHWM just before SIGTERM; goal <= 16 MiB) =="
echo "tick, 10k finished MiB: $(stat_field rss "$tmp/tick-small")"
echo "tick, 1M finished MiB: $(stat_field rss "$tmp/tick-big")"
echo "runs per second MiB: $rate_rss"

# ------------------------------------------------------------------- binary
echo
echo "== binary size (budget 4 MiB) =="
static=target/x86_64-unknown-linux-musl/release/orca
if [ -f "$static" ]; then
  size=$(stat -c %s "$static")
  echo "static binary bytes: $size"
  echo "static binary MiB: $(mib "$size")"
else
  echo "static binary: not built (make static)"
fi
size=$(stat -c %s "$ORCA_BIN")
echo "bench binary ($ORCA_BIN) MiB: $(mib "$size")"

# ------------------------------------------------------------- config check
# `orca check` of files just under the 1 MiB limit: one with some 80,000
# problems (unknown keys), one with 13,000 pipelines whose schedules never
# fire (each a different expression), and a refused one (/dev/zero).
check_time() {
  local t0 rc=0
  t0=$(now)
  "$ORCA_BIN" check -c "$1" >/dev/null 2>"$tmp/check.err" || rc=$?
  echo "$(since "$t0") s, exit $rc, $(wc -l <"$tmp/check.err") lines"
}
awk 'BEGIN { print "[pipelines.a]\ncommand = \"true\""; for (i = 0; i < 80000; i++) print "b" i " = 1" }' \
  >"$tmp/problems.toml"
awk 'BEGIN { for (i = 0; i < 13000; i++)
  printf "[pipelines.a%d]\ncommand=\"t\"\nplacement=\"worker:z%d\"\nschedule=\"%d %d 31 2 *\"\n", i, i, i % 60, int(i / 60) % 24 }' \
  >"$tmp/never.toml"
echo
echo "== config check (files up to the 1 MiB limit) =="
echo "80000 problems, $(mib "$(stat -c %s "$tmp/problems.toml")") MiB: $(check_time "$tmp/problems.toml")"
echo "13000 schedules that never fire, $(mib "$(stat -c %s "$tmp/never.toml")") MiB: $(check_time "$tmp/never.toml")"
echo "/dev/zero: $(check_time /dev/zero)"

# -------------------------------------------------------------------- pools
# 1. A scaler pass with pool_n pools x 20 live machines each (rows only, all
#    seen, at max_machines) and 10,000 queued runs of their pipelines: the
#    scheduler runs a pass every tick (ORCA_POOL_SCALE_SECONDS=0) for
#    measure_pool_s seconds; ORCA_TICK_STATS gives each pass's ms and
#    statements.
# 2. Claims per second: 8 pgbench clients, each logged in as a pool machine
#    of its own, each transaction one `orca.worker_claim(1)` and then the
#    `orca.worker_finish` of what it claimed, as a worker does (8 pipelines,
#    100,000 queued); beside pgbench's own simple-update, 8 clients.
# 3. A worker's peak RSS while it runs 200 runs of ["true"].
pool_n=100
measure_pool_s=${ORCA_BENCH_POOL_SECONDS:-10}
pgbench=${ORCA_PG_BINDIR:-/usr/lib/postgresql/15/bin}/pgbench
url_pools=$(db_url orca_bench_pools)
log "pools: $pool_n pools x 20 machines, 10000 queued runs"
{
  for i in $(seq 1 "$pool_n"); do
    printf '[pools.p%s]\ntypes = [{ type = "small", wait = 0 }]\nlocations = ["here"]\nmax_machines = 20\nidle_seconds = 3600\n\n' "$i"
    printf '[pipelines.w%s]\ncommand = ["true"]\nplacement = "worker:p%s"\nmax_runs = 50\n\n' "$i" "$i"
  done
} >"$tmp/pools.toml"
fresh_db orca_bench_pools "$tmp/pools.toml"
sql "$url_pools" >/dev/null <<SQL
INSERT INTO orca.runs (pipeline, queued_at, not_before)
SELECT 'w' || (1 + g % $pool_n), now() - interval '1 hour', now() - interval '1 hour'
FROM generate_series(0, 9999) g;
INSERT INTO orca.pool_machines (pool, name, type, location, role, slots, seen_at, busy_at)
SELECT 'p' || p, 'orca-p' || p || '-' || m, 'small', 'here', 'bench_p' || p || '_' || m, 1,
       now() + interval '1 hour', now() + interval '1 hour'
FROM generate_series(1, $pool_n) p, generate_series(1, 20) m;
ANALYZE;
SQL
ORCA_POOL_SCALE_SECONDS=0 ORCA_POOL_GROW_AFTER=0 start_sched "$url_pools" 0.1 "$tmp/stats-pools" "$tmp/sched-pools.log"
pools_pid=$SCHED_PID
sleep "$measure_pool_s"
pools_status=$(sql "$url_pools" -c "SELECT count(*) FILTER (WHERE status LIKE 'at max_machines%') || ' of ' || count(*) FROM orca.pools")
pools_made=$(sql "$url_pools" -c "SELECT count(*) FROM orca.pool_machines" )
pools_exit=0
stop_sched "$pools_pid" 10 || pools_exit=$?

log "claims: pgbench, 8 clients, ${measure_pool_s}s each"
url_claims=$(db_url orca_bench_claims)
{
  printf '[pools.c]\ntypes = [{ type = "small", wait = 0 }]\nlocations = ["here"]\n\n'
  for i in $(seq 1 8); do
    printf '[pipelines.c%s]\ncommand = ["true"]\nplacement = "worker:c"\nmax_runs = 10000\n\n' "$i"
  done
} >"$tmp/claims.toml"
fresh_db orca_bench_claims "$tmp/claims.toml"
claim_role=orca_bench_claimer_$$
sql "$url_claims" >/dev/null <<SQL
INSERT INTO orca.runs (pipeline) SELECT 'c' || (1 + g % 8) FROM generate_series(0, 99999) g;
ANALYZE;
SQL
for i in $(seq 1 8); do
  sql "$url_claims" >/dev/null <<SQL
CREATE ROLE ${claim_role}_$i LOGIN PASSWORD 'bench' IN ROLE orca_worker;
INSERT INTO orca.pool_machines (pool, name, type, location, role, slots, seen_at)
VALUES ('c', 'orca-c-bench-$i', 'small', 'here', '${claim_role}_$i', 64, now());
SQL
done
hostport=$(printf '%s' "$url_claims" | sed -E 's|^[a-z]+://([^@/]*@)?([^/?]*).*|\2|')
# As a worker does: a claim, then the end of what it claimed.
cat >"$tmp/claim.sql" <<'PGB'
SELECT id, start FROM orca.worker_claim(1) \gset
SELECT orca.worker_finish(:id, :start, 'succeeded', 0, NULL, 'bench', ''::bytea, '{}');
PGB
claims_tps=n/a; simple_tps=n/a
if [ -x "$pgbench" ]; then
  # One pgbench per machine (each logs in as its own role), all at once.
  pgb_pids=""
  for i in $(seq 1 8); do
    "$pgbench" -n -c 1 -T "$measure_pool_s" -f "$tmp/claim.sql" \
      "postgres://${claim_role}_$i:bench@$hostport/orca_bench_claims" >"$tmp/pgbench-claims-$i.log" 2>&1 &
    pgb_pids="$pgb_pids $!"
  done
  for p in $pgb_pids; do wait "$p" || log "a claims pgbench failed: $(tail -n 2 "$tmp"/pgbench-claims-*.log | head -n 4)"; done
  claims_tps=$(cat "$tmp"/pgbench-claims-*.log | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | awk '{ s += $1 } END { printf "%.0f", s }')
  claims_done=$(sql "$url_claims" -c "SELECT count(*) FROM orca.runs WHERE state = 'succeeded'")
  url_pgb=$(db_url orca_bench_pgbench)
  drop_db orca_bench_pgbench; made_dbs="$made_dbs orca_bench_pgbench"
  sql "$ORCA_TEST_DATABASE_URL" -c "CREATE DATABASE orca_bench_pgbench" >/dev/null
  "$pgbench" -q -i -s 10 "$url_pgb" >"$tmp/pgbench-init.log" 2>&1
  "$pgbench" -n -b simple-update -c 8 -j 2 -T "$measure_pool_s" "$url_pgb" >"$tmp/pgbench-simple.log" 2>&1 || true
  simple_tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$tmp/pgbench-simple.log" | tail -n 1)
else
  log "no pgbench at $pgbench: claim figures skipped"
fi

log "worker RSS: 200 runs of [\"true\"]"
sql "$url_claims" -c "UPDATE orca.runs SET state = 'cancelled' WHERE state = 'queued'; INSERT INTO orca.runs (pipeline) SELECT 'c1' FROM generate_series(1, 200)" >/dev/null
ORCA_DATABASE_URL="postgres://$hostport/orca_bench_claims" ORCA_TOKEN="${claim_role}_1:bench" ORCA_TICK_SECONDS=0.05 \
  "$ORCA_BIN" worker --pool c >"$tmp/worker.log" 2>&1 &
worker_pid=$!
t0=$(now)
while [ "$(sql "$url_claims" -c "SELECT count(*) FROM orca.runs WHERE state IN ('queued', 'running')")" != 0 ]; do
  if awk -v e="$(since "$t0")" 'BEGIN { exit !(e > 120) }' || ! alive "$worker_pid"; then break; fi
  sleep 0.2
done
worker_took=$(since "$t0")
worker_rss=$(peak_rss_mib "$worker_pid")
kill -TERM "$worker_pid" 2>/dev/null || true
wait "$worker_pid" 2>/dev/null || true
sql "$ORCA_TEST_DATABASE_URL" -c "DROP DATABASE IF EXISTS orca_bench_claims WITH (FORCE)" >/dev/null || true
for i in $(seq 1 8); do sql "$ORCA_TEST_DATABASE_URL" -c "DROP ROLE IF EXISTS ${claim_role}_$i" >/dev/null || true; done

echo
echo "== pools: a scaler pass, $pool_n pools x 20 machines, 10000 queued; claims; worker =="
echo "scaler passes: $(stat_field scaler_passes "$tmp/stats-pools")"
echo "scaler pass p50 ms: $(stat_field scaler_p50_ms "$tmp/stats-pools")"
echo "scaler pass max ms: $(stat_field scaler_max_ms "$tmp/stats-pools")"
echo "scaler statements per pass: $(stat_field scaler_statements_per_pass "$tmp/stats-pools")"
echo "pools at max_machines at stop: $pools_status"
echo "machines made (rows; 2000 preloaded): $pools_made"
echo "scheduler exit code: $pools_exit"
echo "claims per second, 8 machines (pgbench: worker_claim(1), then worker_finish of it): ${claims_tps:-n/a}"
echo "runs claimed and finished: ${claims_done:-n/a}"
echo "pgbench simple-update per second, 8 clients: ${simple_tps:-n/a}"
if [ -n "${claims_tps:-}" ] && [ -n "${simple_tps:-}" ] && [ "$claims_tps" != n/a ] && [ "$simple_tps" != n/a ]; then
  echo "claims / simple-update (goal >= 0.30): $(awk -v c="$claims_tps" -v s="$simple_tps" 'BEGIN { printf "%.2f", c / s }')"
fi
echo "worker: 200 runs of [\"true\"] s: $worker_took"
echo "worker peak RSS MiB: $worker_rss"

# --------------------------------------------------------------- warm pool
# The instance's side: idle_n instances each running `orca pool-next` with
# a login of its own for warm_s seconds: transactions per second on their
# database per idle instance (pg_stat_database), then a hand-over to each
# (the scheduler's part played by SQL): from the hand-over's commit to
# pool-next's exit, and pool-next's peak RSS.
idle_n=10
warm_s=${ORCA_BENCH_WARM_SECONDS:-10}
url_warm=$(db_url orca_bench_warm)
log "warm pool: $idle_n idle instances for ${warm_s}s"
printf '[pipelines.job]\ncommand = "true"\nplacement = "ec2"\n[pipelines.job.ec2]\ntype = "small"\nlocations = ["here"]\n' >"$tmp/warm.toml"
fresh_db orca_bench_warm "$tmp/warm.toml"
warm_role=orca_bench_inst_$$
sql "$url_warm" >/dev/null <<SQL
CREATE ROLE $warm_role LOGIN PASSWORD 'bench' IN ROLE orca_instance;
INSERT INTO orca.runs (pipeline, state, start) SELECT 'job', 'running', 1 FROM generate_series(1, $idle_n);
INSERT INTO orca.instances (instance, run, start, role, login, state)
SELECT 'i-' || id, id, 1, 'head', '$warm_role', 'joined' FROM orca.runs;
SQL
warm_hostport=$(printf '%s' "$url_warm" | sed -E 's|^[a-z]+://([^@/]*@)?([^/?]*).*|\2|')
warm_pids=""
for id in $(sql "$url_warm" -c "SELECT id FROM orca.runs ORDER BY id"); do
  ORCA_DATABASE_URL="postgres://$warm_hostport/orca_bench_warm" ORCA_TOKEN="$warm_role:bench" \
    "$ORCA_BIN" pool-next "i-$id" "$id" 1 3600 >"$tmp/next-$id.out" 2>"$tmp/next-$id.err" &
  warm_pids="$warm_pids $!"
done
t0=$(now)
while [ "$(sql "$url_warm" -c "SELECT count(*) FROM orca.instances WHERE state = 'idle'")" != "$idle_n" ]; do
  if awk -v e="$(since "$t0")" 'BEGIN { exit !(e > 60) }'; then log "pool-next did not go idle"; break; fi
  sleep 0.2
done
xacts() { sql "$url_warm" -c "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'orca_bench_warm'"; }
x0=$(xacts); t0=$(now)
sleep "$warm_s"
x1=$(xacts); took=$(since "$t0")
warm_rate=$(awk -v a="$x0" -v b="$x1" -v t="$took" -v n="$idle_n" 'BEGIN { printf "%.2f", (b - a) / t / n }')
warm_rss=$(peak_rss_mib "$(echo $warm_pids | awk '{ print $1 }')")
# Hand each instance the next run, one at a time, timing commit → exit.
handover=""
for id in $(sql "$url_warm" -c "SELECT id FROM orca.runs ORDER BY id"); do
  pid=$(echo $warm_pids | tr ' ' '\n' | sed -n "$(( $(echo "$handover" | wc -w) + 1 ))p")
  t0=$(now)
  sql "$url_warm" >/dev/null <<SQL
BEGIN;
UPDATE orca.instances SET state = 'ended', ended_at = now(), why = 'handed over' WHERE instance = 'i-$id' AND ended_at IS NULL;
INSERT INTO orca.instances (instance, run, start, role, login, state, address) VALUES ('i-$id', $id, 2, 'worker', '$warm_role', 'pooled', '10.0.0.1');
COMMIT;
SQL
  wait_gone "$pid" 10 || log "pool-next $pid did not exit within 10 s of its hand-over"
  handover="$handover $(since "$t0")"
done
for p in $warm_pids; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
drop_db orca_bench_warm || true
sql "$ORCA_TEST_DATABASE_URL" -c "DROP ROLE IF EXISTS $warm_role" >/dev/null || true

echo
echo "== warm pool ($idle_n idle instances for ${warm_s} s; hand-overs through the scheduler) =="
echo "transactions per second per idle instance: $warm_rate"
# shellcheck disable=SC2086  # a word list on purpose
echo "hand-over committed to pool-next's exit s, p50 / max: $(printf '%s\n' $handover | sort -n | awk '{ a[NR] = $1 } END { printf "%s / %s", a[int((NR + 1) / 2)], a[NR] }')"
echo "pool-next peak RSS MiB (goal <= 8): $warm_rss"
# The scheduler's side: runs of a pipeline on EC2 (local provider: instances
# are process groups running scripts/instance.sh) with a head and two
# workers, one after another; each after the first is handed the previous
# run's warm instances. Run queued → its last instance joined, by the
# database's clock.
handover_n=${ORCA_BENCH_HANDOVERS:-10}
url_hand=$(db_url orca_bench_handover)
log "warm pool: $handover_n hand-overs through the scheduler"
printf '[pipelines.job]\ncommand = ["true"]\nplacement = "ec2"\n[pipelines.job.ec2]\ntype = "small"\nlocations = ["here"]\nworkers = 2\n' >"$tmp/handover.toml"
fresh_db orca_bench_handover "$tmp/handover.toml"
ORCA_DATABASE_URL=$url_hand ORCA_TICK_SECONDS=0.1 ORCA_EC2_POOL_SECONDS=120 \
  "$ORCA_BIN" scheduler >"$tmp/sched-handover.log" 2>&1 &
hand_pid=$!
sched_pids="$sched_pids $hand_pid"
hand_stack=""
hand_ok=0
for i in $(seq 0 "$handover_n"); do
  run=$(ORCA_DATABASE_URL=$url_hand "$ORCA_BIN" run job)
  t0=$(now)
  until [ "$(sql "$url_hand" -c "SELECT count(*) FROM orca.runs WHERE id = $run AND state = 'succeeded'")" = 1 ] &&
        [ "$(sql "$url_hand" -c "SELECT count(*) FROM orca.instances WHERE state = 'idle' AND ended_at IS NULL")" = 3 ]; do
    if awk -v e="$(since "$t0")" 'BEGIN { exit !(e > 60) }'; then log "run $run: not done and idle within 60 s"; break 2; fi
    sleep 0.1
  done
  hand_ok=$i
done
handover=$(sql "$url_hand" -c "SELECT extract(epoch FROM max(i.joined_at) - r.queued_at)::numeric(10,3)
  FROM orca.runs r JOIN orca.instances i ON i.run = r.id WHERE r.id > (SELECT min(id) FROM orca.runs)
  GROUP BY r.id, r.queued_at ORDER BY 1")
hand_new=$(sql "$url_hand" -c "SELECT count(DISTINCT instance) FROM orca.instances")
hand_stack=$(sql "$url_hand" -c "SELECT id FROM orca.stack")
stop_sched "$hand_pid" 10 || true
# Its instances outlive the scheduler, as EC2 instances do: end them.
for env in /proc/[0-9]*/environ; do
  if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -qx "ORCA_LOCAL_LABELS=.*orca-stack=$hand_stack"; then
    p=${env#/proc/}; p=${p%/environ}
    kill -KILL -- "-$p" 2>/dev/null || true
  fi
done
drop_db orca_bench_handover || true
for r in $(sql "$ORCA_TEST_DATABASE_URL" -c "SELECT rolname FROM pg_roles WHERE starts_with(rolname, 'orca_i_${hand_stack}_')"); do
  sql "$ORCA_TEST_DATABASE_URL" -c "DROP ROLE IF EXISTS $r" >/dev/null || true
done
echo "run queued to its instances joined s (warm hand-over, $hand_ok runs), p50 / p99 / max (goal <= 2): $(printf '%s\n' $handover | sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) print "n/a"; else printf "%s / %s / %s", a[int((NR + 1) / 2)], a[int(NR * 0.99 + 0.99)], a[NR] }')"
echo "instances made for $((hand_ok + 1)) runs of a head and 2 workers: $hand_new"

# -------------------------------------------------------- scheduler overlap
# With ORCA_OVERLAP=on, how long no scheduler leads, from real processes, each
# figure repeated overlap_reps times on a fresh orca_bench_overlap (its one
# pipeline never fires: no runs, so a draining scheduler ends at once):
#   - deploy handover: A leads, B starts; B's 'lead taken' event at minus A's
#     'draining' event at (the database's clock);
#   - crash: A leads, kill -9 A, start C at once; wall time from the kill to
#     C's row leading, polled every 0.05 s (each poll is a psql, so the figure
#     is late by up to ~0.1 s);
#   - hang: as crash, with SIGSTOP instead, a stale limit of 3 s; then SIGCONT
#     and A should drain and exit by itself.
# The tick is the default 1 s, as in production; the stale limit the default
# 10 s but for the hang. The figures depend on where in A's tick B starts, or
# A dies or hangs (ticks run on a fixed 1 s grid); a deploy or a crash comes
# at any moment of it, so repetition i waits (i - 0.5) / reps s after seeing
# A lead (which A does on its first tick) before it acts: phases spread over
# the tick, not all just after it.
overlap_reps=${ORCA_BENCH_OVERLAP_REPS:-5}
url_overlap=$(db_url orca_bench_overlap)
printf '[pipelines.t]\ncommand = "true"\n' >"$tmp/overlap.toml"

since3() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
phase() { awk -v i="$1" -v n="$overlap_reps" 'BEGIN { printf "%.2f", (i - 0.5) / n }'; }
deadline_in() { awk -v t="$(now)" -v s="$1" 'BEGIN { printf "%.3f", t + s }'; }
passed() { awk -v t="$(now)" -v d="$1" 'BEGIN { exit !(t >= d) }'; }

# Starts an overlap scheduler on orca_bench_overlap with ORCA_IMAGE $1, stale
# limit $2 s, its log to file $3; sets SCHED_PID.
start_instance() {
  ORCA_DATABASE_URL=$url_overlap ORCA_OVERLAP=on ORCA_IMAGE=$1 \
    ORCA_TICK_SECONDS=1 ORCA_STALE_SECONDS=$2 \
    "$ORCA_BIN" scheduler >"$3" 2>&1 &
  SCHED_PID=$!
  sched_pids="$sched_pids $SCHED_PID"
  is_sched "$SCHED_PID"
}

# Column expression $2 of the newest orca.schedulers row of pid $1.
inst() {
  sql "$url_overlap" -c "SELECT $2 FROM orca.schedulers WHERE pid = $1 ORDER BY id DESC LIMIT 1"
}

# Waits up to $2 s for scheduler $1's row to lead; its log is file $3.
wait_leads() {
  local pid=$1 deadline leads
  deadline=$(deadline_in "$2")
  while :; do
    leads=$(inst "$pid" leads 2>/dev/null || true)
    [ "$leads" = t ] && return 0
    if ! alive "$pid"; then
      log "scheduler $pid exited before it led; its log:"
      tail -n 20 "$3" >&2
      return 1
    fi
    if passed "$deadline"; then
      log "scheduler $pid did not lead within $2 s; its log:"
      tail -n 20 "$3" >&2
      return 1
    fi
    sleep 0.05
  done
}

# Waits up to $2 s for scheduler $1 to exit by itself; sets EXIT_RC to its
# exit code, or "none" (and SIGKILLs it) if it did not; its log is file $3.
wait_exit() {
  local pid=$1
  EXIT_RC=0
  if wait_gone "$pid" "$2"; then
    wait "$pid" 2>/dev/null || EXIT_RC=$?
    forget_pid "$pid"
  else
    EXIT_RC=none
    log "scheduler $pid still running ${2}s after it should have exited by itself; its log:"
    tail -n 20 "$3" >&2
    stop_sched "$pid" 5 >/dev/null || true
  fi
}

# SIGTERM to scheduler $1 (with overlap on: drain), up to 30 s for it to exit;
# sets TERM_RC to its exit code (137: it did not, and was SIGKILLed). Not in a
# $(...): the wait and the forgetting must happen in this shell.
term_rc() {
  TERM_RC=0
  stop_sched "$1" 30 || TERM_RC=$?
}

# Stops what repetition left running (after a failure): SIGCONT, SIGTERM,
# SIGKILL 5 s later.
rep_cleanup() {
  local p
  stopped_pids=""
  for p in "$@"; do
    case " $sched_pids " in
      *" $p "*) kill -CONT "$p" 2>/dev/null || true; stop_sched "$p" 5 >/dev/null || true ;;
    esac
  done
}

ov_phase="" ov_gap="" ov_join_lead="" ov_a_exit="" ov_b_exit=""
ov_crash="" ov_crash_ls="" ov_c_exit=""
ov_hang="" ov_hang_ls="" ov_hung_gone="" ov_hung_exit="" ov_hung_took="" ov_d_exit=""

# Deploy handover, repetition $1.
overlap_deploy() {
  local i=$1 a b v la="$tmp/ov-deploy-a-$1.log" lb="$tmp/ov-deploy-b-$1.log"
  fresh_db orca_bench_overlap "$tmp/overlap.toml"
  start_instance a 10 "$la"
  a=$SCHED_PID
  if ! wait_leads "$a" 30 "$la"; then
    rep_cleanup "$a"
    ov_gap="$ov_gap n/a" ov_join_lead="$ov_join_lead n/a"
    return 0
  fi
  ov_phase="$ov_phase $(phase "$i")"
  sleep "$(phase "$i")"
  start_instance b 10 "$lb"
  b=$SCHED_PID
  if ! wait_leads "$b" 30 "$lb"; then
    rep_cleanup "$a" "$b"
    ov_gap="$ov_gap n/a" ov_join_lead="$ov_join_lead n/a"
    return 0
  fi
  v=$(sql "$url_overlap" -c "
    SELECT round(extract(epoch FROM l.at - d.at)::numeric, 3)
    FROM orca.schedulers sa, orca.schedulers sb, orca.events d, orca.events l
    WHERE sa.pid = $a AND sb.pid = $b
      AND d.kind = 'draining' AND d.why LIKE 'scheduler ' || sa.id || ' on %'
      AND l.kind = 'lead taken' AND l.why LIKE 'scheduler ' || sb.id || ' on %'
    ORDER BY d.id DESC, l.id DESC LIMIT 1")
  ov_gap="$ov_gap ${v:-n/a}"
  v=$(inst "$b" "round(extract(epoch FROM lead_since - joined_at)::numeric, 3)")
  ov_join_lead="$ov_join_lead ${v:-n/a}"
  wait_exit "$a" 30 "$la"
  ov_a_exit="$ov_a_exit $EXIT_RC"
  term_rc "$b"
  ov_b_exit="$ov_b_exit $TERM_RC"
  log "overlap deploy $i: gap $(echo "$ov_gap" | awk '{ print $NF }') s"
}

# Crash (kill -9) of the leader, repetition $1.
overlap_crash() {
  local i=$1 a c t0 v la="$tmp/ov-crash-a-$1.log" lc="$tmp/ov-crash-c-$1.log"
  fresh_db orca_bench_overlap "$tmp/overlap.toml"
  start_instance a 10 "$la"
  a=$SCHED_PID
  if ! wait_leads "$a" 30 "$la"; then
    rep_cleanup "$a"
    ov_crash="$ov_crash n/a" ov_crash_ls="$ov_crash_ls n/a"
    return 0
  fi
  sleep "$(phase "$i")"
  t0=$(now)
  kill -KILL "$a" 2>/dev/null || true
  start_instance c 10 "$lc"
  c=$SCHED_PID
  if ! wait_leads "$c" 30 "$lc"; then
    rep_cleanup "$a" "$c"
    ov_crash="$ov_crash n/a" ov_crash_ls="$ov_crash_ls n/a"
    return 0
  fi
  ov_crash="$ov_crash $(since3 "$t0")"
  v=$(inst "$c" "round(extract(epoch FROM lead_since - joined_at)::numeric, 3)")
  ov_crash_ls="$ov_crash_ls ${v:-n/a}"
  wait_gone "$a" 5 || log "scheduler $a still there 5 s after SIGKILL"
  wait "$a" 2>/dev/null || true
  forget_pid "$a"
  term_rc "$c"
  ov_c_exit="$ov_c_exit $TERM_RC"
  log "overlap crash $i: $(echo "$ov_crash" | awk '{ print $NF }') s"
}

# Hang (SIGSTOP) of the leader, repetition $1.
overlap_hang() {
  local i=$1 a d t0 v la="$tmp/ov-hang-a-$1.log" ld="$tmp/ov-hang-d-$1.log"
  fresh_db orca_bench_overlap "$tmp/overlap.toml"
  start_instance a 3 "$la"
  a=$SCHED_PID
  if ! wait_leads "$a" 30 "$la"; then
    rep_cleanup "$a"
    ov_hang="$ov_hang n/a" ov_hang_ls="$ov_hang_ls n/a"
    return 0
  fi
  sleep "$(phase "$i")"
  t0=$(now)
  stopped_pids="$stopped_pids $a"
  kill -STOP "$a" 2>/dev/null || true
  start_instance d 3 "$ld"
  d=$SCHED_PID
  if ! wait_leads "$d" 30 "$ld"; then
    rep_cleanup "$a" "$d"
    ov_hang="$ov_hang n/a" ov_hang_ls="$ov_hang_ls n/a"
    return 0
  fi
  ov_hang="$ov_hang $(since3 "$t0")"
  v=$(inst "$d" "round(extract(epoch FROM lead_since - joined_at)::numeric, 3)")
  ov_hang_ls="$ov_hang_ls ${v:-n/a}"
  t0=$(now)
  kill -CONT "$a" 2>/dev/null || true
  stopped_pids=""
  wait_exit "$a" 30 "$la"
  if [ "$EXIT_RC" = none ]; then
    ov_hung_gone="$ov_hung_gone no" ov_hung_took="$ov_hung_took n/a"
  else
    ov_hung_gone="$ov_hung_gone yes" ov_hung_took="$ov_hung_took $(since3 "$t0")"
  fi
  ov_hung_exit="$ov_hung_exit $EXIT_RC"
  term_rc "$d"
  ov_d_exit="$ov_d_exit $TERM_RC"
  log "overlap hang $i: $(echo "$ov_hang" | awk '{ print $NF }') s"
}

# `$1, median ($2): m`, `$1, max ($2): x` and `$1, each: ...` of the figures
# $3...; n/a ones (a repetition that failed) are left out of median and max.
figures() {
  local label=$1 goal=${2:+ ($2)} ok n med max
  shift 2
  ok=$(printf '%s\n' "$@" | grep -E '^-?[0-9.]+$' | sort -g || true)
  n=$(printf '%s' "$ok" | grep -c . || true)
  med=$(printf '%s\n' "$ok" | awk 'NF { a[++k] = $1 } END {
    if (k == 0) print "n/a"; else if (k % 2) print a[(k + 1) / 2]; else printf "%.3f\n", (a[k / 2] + a[k / 2 + 1]) / 2 }')
  max=$(printf '%s\n' "$ok" | awk 'NF { m = $1 } END { print (m == "" ? "n/a" : m) }')
  if [ "$n" -lt "$#" ]; then med="$med ($n of $# measured)"; max="$max ($n of $# measured)"; fi
  echo "$label, median$goal: $med"
  echo "$label, max$goal: $max"
  echo "$label, each: $*"
}

# How many of the words $2... are $1, as "k of n".
count_of() {
  local want=$1 k=0 w
  shift
  for w in "$@"; do [ "$w" = "$want" ] && k=$((k + 1)); done
  echo "$k of $#"
}

log "scheduler overlap: $overlap_reps repetitions each of deploy handover, crash, hang"
t0_overlap=$(now)
for i in $(seq 1 "$overlap_reps"); do overlap_deploy "$i"; done
for i in $(seq 1 "$overlap_reps"); do overlap_crash "$i"; done
for i in $(seq 1 "$overlap_reps"); do overlap_hang "$i"; done
overlap_took=$(since "$t0_overlap")
drop_db orca_bench_overlap || true

echo
echo "== scheduler overlap (ORCA_OVERLAP=on) =="
echo "repetitions: $overlap_reps"
echo "tick s: 1 (the default)"
echo "stale limit s: 10 (the default); 3 for the hang"
# shellcheck disable=SC2086  # word lists on purpose
{
  figures "deploy handover gap s (A's draining to B's lead taken)" "goal <= 1 s" $ov_gap
  figures "deploy: B joined to B leading s (lead_since - joined_at)" "" $ov_join_lead
  echo "deploy: B started s after A was seen leading, each: ${ov_phase# }"
  echo "deploy: old leader A exited by itself, exit codes: ${ov_a_exit# }"
  echo "deploy: new leader B exit codes on SIGTERM: ${ov_b_exit# }"
  figures "crash (kill -9) to restarted C leading s" "goal <= 2 s" $ov_crash
  figures "crash: C's lead_since - joined_at s" "" $ov_crash_ls
  echo "crash: C exit codes on SIGTERM: ${ov_c_exit# }"
  figures "hang (SIGSTOP) to new D leading s, stale limit 3 s" "goal <= 5 s" $ov_hang
  figures "hang: D's lead_since - joined_at s" "" $ov_hang_ls
  if [ -n "$ov_hung_gone" ] && [ "$(count_of yes $ov_hung_gone)" = "$overlap_reps of $overlap_reps" ]; then
    echo "hung leader exited after SIGCONT: yes"
  else
    echo "hung leader exited after SIGCONT: no ($(count_of yes $ov_hung_gone) exited within 30 s)"
  fi
  figures "hang: SIGCONT to hung leader's exit s" "" $ov_hung_took
  echo "hang: hung leader exit codes: ${ov_hung_exit# }"
  echo "hang: D exit codes on SIGTERM: ${ov_d_exit# }"
  echo "section wall time s: $overlap_took"
}

# The fleet churn (issue 13, part 2; tests/chaos/churn.rs): machines made
# and removed on the local provider and the fake EC2 under faults, on a
# Postgres cluster of the test's own. ORCA_BENCH_CHURN machines (1000).
churn_n=${ORCA_BENCH_CHURN:-1000}
log "churn: $churn_n machines (cargo test --test chaos churn)"
t0_churn=$(now)
churn_out="$tmp/churn.txt"
churn_rc=0
ORCA_CHAOS_CHURN=$churn_n cargo test -q --test chaos churn::churn -- --exact --nocapture \
  >"$churn_out" 2>&1 || churn_rc=$?
echo
echo "== fleet churn: $churn_n machines, local and fake EC2, faults (goals 0) =="
sed -n 's/^churn figure: //p' "$churn_out"
echo "violation lines: $(grep -c '^violation: ' "$churn_out" || true)"
echo "churn test exit code: $churn_rc"
echo "section wall time s: $(since "$t0_churn")"
[ "$churn_rc" = 0 ] || { grep '^violation: ' "$churn_out" | head -20 >&2; tail -5 "$churn_out" >&2; }
