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
# ORCA_LOG_FILE (/var/log/orca-scheduler.log), moved to ORCA_LOG_FILE.1 each
# time it passes ORCA_LOG_BYTES (10 MiB): at most twice that on disk.
set -e
env_file=${ORCA_ENV_FILE:-/etc/orca/env}
[ -r "$env_file" ] || { echo "orca: $env_file is missing" >&2; exit 1; }
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
set +e

# Appends its standard input's lines to $log, which is moved to $log.1 (the
# one before it dropped) as it passes $cap bytes.
capped() {
  size=$(wc -c 2>/dev/null <"$log") || size=0
  while IFS= read -r line || [ -n "$line" ]; do
    size=$((size + ${#line} + 1))
    if [ "$size" -gt "$cap" ]; then
      mv -f "$log" "$log.1" 2>/dev/null
      size=$((${#line} + 1))
    fi
    printf '%s\n' "$line" >>"$log"
  done
}

# One run of the scheduler, its output to the journal or the capped log;
# returns its exit code.
scheduler() {
  if [ -n "$journal" ]; then
    systemd-cat -t orca-scheduler "$bin" scheduler
    return
  fi
  # The pipeline's status is capped's: the scheduler's comes back on fd 3.
  return "$({ { "$bin" scheduler 2>&1 3>&- 4>&-; echo $? >&3; } | capped >&4; } 3>&1)"
}

say() {
  if [ -n "$journal" ]; then
    echo "$1" | systemd-cat -t orca-scheduler
  else
    echo "$1" | capped
  fi
}

(
  while true; do
    scheduler 4>&1
    code=$?
    if [ "$code" = 0 ]; then
      say "orca scheduler exited 0 (stopped or drained); not restarting"
      break
    fi
    say "orca scheduler exited ($code); restarting"
    sleep 1
  done
) &
