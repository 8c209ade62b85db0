#!/bin/sh
# What every machine orca makes runs first, before its own script
# (scripts/boot.sh for a pool machine, scripts/instance.sh for an EC2 run's
# instance): orca embeds this prelude and the script as one, in this order.
#
#   ORCA_TOKEN_FILE      where the live secret is kept (default /run/orca/token)
#   ORCA_RUN_AS          the user runs execute as (default as root: orca-run)
#   ORCA_RUN_UIDS        FIRST-LAST: each run a uid of its own from the range instead
#   ORCA_BLOCK_METADATA  set (by the EC2 provider): runs may not reach the metadata service
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
# process: iptables rejects the packets of ORCA_RUN_AS, and of ORCA_RUN_UIDS's
# range, to it.
if [ -n "${ORCA_BLOCK_METADATA:-}" ]; then
  if [ -z "${ORCA_RUN_AS:-}" ] && [ -z "${ORCA_RUN_UIDS:-}" ]; then
    echo "orca machine: runs execute as this script's user: they can reach the metadata service" >&2
  elif ! command -v iptables >/dev/null 2>&1; then
    echo "orca machine: no iptables: runs can reach the metadata service" >&2
  else
    for owner in ${ORCA_RUN_AS:-} ${ORCA_RUN_UIDS:-}; do
      iptables -C OUTPUT -m owner --uid-owner "$owner" -d 169.254.169.254 -j REJECT 2>/dev/null ||
        iptables -A OUTPUT -m owner --uid-owner "$owner" -d 169.254.169.254 -j REJECT ||
        echo "orca machine: iptables failed: runs can reach the metadata service" >&2
    done
  fi
fi
