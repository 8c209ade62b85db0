#!/bin/sh
# Boots a pool machine as a worker: the same script for every provider (the
# local provider runs it as a process group; on EC2 it is the user-data, with
# the settings below exported before it).
#
#   ORCA_POOL          the machine's pool
#   ORCA_TOKEN         the machine's own credentials (ROLE:SECRET)
#   ORCA_DATABASE_URL  where the database is (no user or password in it)
#   ORCA_BIN           the orca binary (default: orca on PATH)
#   ORCA_SHUTDOWN      how to shut the machine down (default: shutdown -h now)
#   ORCA_TOKEN_FILE    where the live secret is kept (default /run/orca/token)
#   ORCA_BLOCK_METADATA set (by the EC2 provider): runs may not reach the metadata service
#   ORCA_RUN_AS        the user runs execute as (default as root: orca-run)
#
# The worker is started again a second after it fails. Stopped (exit 0, after
# SIGTERM), it stays stopped; its credentials revoked (exit 3: the machine was
# removed), the machine shuts down.
bin=${ORCA_BIN:-orca}
# ORCA_TOKEN is single-use: the first login replaces it and keeps the new
# secret in ORCA_TOKEN_FILE (a directory only this user reads), so the token
# in user-data, or in this shell's environment, logs nobody in afterwards.
# Runs execute as ORCA_RUN_AS: by default, as root, an unprivileged orca-run
# user (made if missing), out of reach of orca's processes and files; set it
# empty to run them as this script's user.
export ORCA_TOKEN_FILE="${ORCA_TOKEN_FILE:-/run/orca/token}"
(umask 077 && mkdir -p "$(dirname "$ORCA_TOKEN_FILE")")
rm -f "$ORCA_TOKEN_FILE" "$ORCA_TOKEN_FILE.new"
if [ -z "${ORCA_RUN_AS+set}" ] && [ "$(id -u)" = 0 ]; then
  id -u orca-run >/dev/null 2>&1 ||
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin orca-run >/dev/null 2>&1 ||
    adduser -S -H -s /sbin/nologin orca-run >/dev/null 2>&1
  export ORCA_RUN_AS=orca-run
  # Nothing a run leaves behind starts later: no cron or at jobs.
  for deny in /etc/cron.deny /etc/at.deny; do
    grep -qx orca-run "$deny" 2>/dev/null || echo orca-run >>"$deny"
  done
fi
# On EC2 (its provider sets ORCA_BLOCK_METADATA=1) runs may not reach the
# metadata service, which serves this instance's profile credentials to any
# process: iptables rejects ORCA_RUN_AS's packets to it.
if [ -n "${ORCA_BLOCK_METADATA:-}" ]; then
  if [ -z "${ORCA_RUN_AS:-}" ]; then
    echo "orca boot: runs execute as this script's user: they can reach the metadata service" >&2
  elif ! command -v iptables >/dev/null 2>&1; then
    echo "orca boot: no iptables: runs can reach the metadata service" >&2
  else
    iptables -C OUTPUT -m owner --uid-owner "$ORCA_RUN_AS" -d 169.254.169.254 -j REJECT 2>/dev/null ||
      iptables -A OUTPUT -m owner --uid-owner "$ORCA_RUN_AS" -d 169.254.169.254 -j REJECT ||
      echo "orca boot: iptables failed: runs can reach the metadata service" >&2
  fi
fi
while :; do
  "$bin" worker --pool "$ORCA_POOL"
  code=$?
  if [ "$code" -eq 0 ]; then
    echo "orca boot: the worker was stopped: not starting it again" >&2
    exit 0
  fi
  if [ "$code" -eq 3 ]; then
    echo "orca boot: this machine's credentials were revoked: shutting down" >&2
    ${ORCA_SHUTDOWN:-shutdown -h now}
    exit 0
  fi
  echo "orca boot: the worker exited with $code: starting it again" >&2
  sleep 1
done
