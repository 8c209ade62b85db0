#!/bin/sh
# EC2 user-data for a scheduler machine whose AMI has /usr/local/bin/orca:
# keeps one `orca scheduler` running, restarting it at once if it dies, but
# not after a clean exit 0 (with ORCA_OVERLAP=on: it drained for a newer one).
#
# No secret goes in user-data: any process on the instance can read it from
# the metadata service. Put ORCA_DATABASE_URL (with its password) in
# /etc/orca/env (mode 0600, root's), baked into the AMI or fetched here from
# your secret store: a shell file of NAME='value' lines (`export` optional),
# the same file the systemd unit (orca-scheduler.service) reads.
#
# The scheduler's log goes to the journal where there is one (systemd-cat:
# `journalctl -t orca-scheduler`) and ORCA_LOG_FILE is not set, else to
# ORCA_LOG_FILE (/var/log/orca-scheduler.log), copied to ORCA_LOG_FILE.1 and
# emptied once it passes ORCA_LOG_BYTES (10 MiB; looked at every
# ORCA_LOG_CHECK_SECONDS, 10): about twice that on disk at most.
#
# Exit 2 from the scheduler is bad input (a setting out of range, a URL with
# no password): not restarted. SIGTERM or SIGINT to this loop is passed to
# the scheduler (which stops, or drains with ORCA_OVERLAP=on), and the loop
# ends with it.
set -e
env_file=${ORCA_ENV_FILE:-/etc/orca/env}
[ -r "$env_file" ] || { echo "orca: $env_file is missing" >&2; exit 1; }
# Read first in a subshell whose complaints go nowhere: an unquoted value
# with a space would run as a command, and the shell's complaint would
# quote it (password included).
( . "$env_file" ) >/dev/null 2>&1 ||
  { echo "orca: $env_file is not lines of NAME='value' (quoted values)" >&2; exit 1; }
set -a
. "$env_file"
set +a
export ORCA_OVERLAP=${ORCA_OVERLAP:-on}
export RUST_LOG=${RUST_LOG:-info}
bin=${ORCA_BIN:-/usr/local/bin/orca}
journal=
if [ -z "${ORCA_LOG_FILE:-}" ] && command -v systemd-cat >/dev/null 2>&1 &&
   [ -S /run/systemd/journal/stdout ]; then
  journal=1
fi
log=${ORCA_LOG_FILE:-/var/log/orca-scheduler.log}
cap=${ORCA_LOG_BYTES:-10485760}
check=${ORCA_LOG_CHECK_SECONDS:-10}
case $cap in ''|*[!0-9]*) echo "orca: ORCA_LOG_BYTES=$cap is not a number of bytes" >&2; exit 1 ;; esac
# Runs (local pipelines, sensors) execute as an unprivileged user, which may
# not reach the metadata service: this machine's role can make and end
# instances, and its user-data is there (docs/security.md).
export ORCA_RUN_AS=${ORCA_RUN_AS-orca-run}
if [ -n "$ORCA_RUN_AS" ]; then
  id -u "$ORCA_RUN_AS" >/dev/null 2>&1 ||
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$ORCA_RUN_AS"
  for deny in /etc/cron.deny /etc/at.deny; do
    grep -qx "$ORCA_RUN_AS" "$deny" 2>/dev/null || echo "$ORCA_RUN_AS" >>"$deny"
  done
  if command -v iptables >/dev/null 2>&1; then
    iptables -C OUTPUT -m owner --uid-owner "$ORCA_RUN_AS" -d 169.254.169.254 -j REJECT 2>/dev/null ||
      iptables -A OUTPUT -m owner --uid-owner "$ORCA_RUN_AS" -d 169.254.169.254 -j REJECT
  else
    echo "orca: no iptables: runs can reach the metadata service" >&2
  fi
fi
# Runs as uids of their own (ORCA_RUN_UIDS=FIRST-LAST) may not either.
if [ -n "${ORCA_RUN_UIDS:-}" ]; then
  if command -v iptables >/dev/null 2>&1; then
    iptables -C OUTPUT -m owner --uid-owner "$ORCA_RUN_UIDS" -d 169.254.169.254 -j REJECT 2>/dev/null ||
      iptables -A OUTPUT -m owner --uid-owner "$ORCA_RUN_UIDS" -d 169.254.169.254 -j REJECT
  else
    echo "orca: no iptables: runs can reach the metadata service" >&2
  fi
fi
set +e

# Every $check seconds: a log past $cap bytes is copied to $log.1 and
# emptied (the scheduler appends, so it writes on from the start).
rotate() {
  while sleep "$check"; do
    size=$(wc -c 2>/dev/null <"$log") || continue
    if [ "$size" -gt "$cap" ]; then cp "$log" "$log.1" && : >"$log"; fi
  done
}

say() {
  if [ -n "$journal" ]; then
    echo "$1" | systemd-cat -t orca-scheduler
  else
    echo "$1" >>"$log"
  fi
}

(
  rotator=
  if [ -z "$journal" ]; then
    rotate </dev/null >/dev/null 2>&1 &
    rotator=$!
  fi
  pid=
  trap '[ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null; stopping=1' TERM INT
  stopping=
  while [ -z "$stopping" ]; do
    if [ -n "$journal" ]; then
      systemd-cat -t orca-scheduler "$bin" scheduler </dev/null &
    else
      "$bin" scheduler </dev/null >>"$log" 2>&1 &
    fi
    pid=$!
    # A trapped signal ends a wait early: wait until the scheduler is gone.
    wait "$pid"
    code=$?
    while kill -0 "$pid" 2>/dev/null; do
      wait "$pid"
      code=$?
    done
    pid=
    if [ "$code" = 0 ] || [ -n "$stopping" ]; then
      say "orca scheduler exited $code (stopped or drained); not restarting"
      break
    fi
    if [ "$code" = 2 ]; then
      say "orca scheduler exited 2 (bad input: its one line above says which); not restarting"
      break
    fi
    say "orca scheduler exited ($code); restarting"
    sleep 1
  done
  [ -z "$rotator" ] || kill "$rotator" 2>/dev/null
) &
