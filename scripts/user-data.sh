#!/bin/sh
# EC2 user-data for a scheduler machine whose AMI has /usr/local/bin/orca:
# keeps one `orca scheduler` running, restarting it at once if it dies, but
# not after a clean exit 0 (with ORCA_OVERLAP=on: it drained for a newer one).
#
# No secret goes in user-data: any process on the instance can read it from
# the metadata service. Put ORCA_DATABASE_URL (with its password) in
# /etc/orca/env (mode 0600, root's), baked into the AMI or fetched here from
# your secret store, as lines `export NAME='value'`.
set -e
[ -r /etc/orca/env ] || { echo "orca: /etc/orca/env is missing" >&2; exit 1; }
. /etc/orca/env
export ORCA_OVERLAP=${ORCA_OVERLAP:-on}
export RUST_LOG=${RUST_LOG:-info}
# Runs (local pipelines, sensors) execute as an unprivileged user, which may
# not reach the metadata service: this machine's role can make and end
# instances, and its user-data is there (docs/security.md).
export ORCA_RUN_AS=${ORCA_RUN_AS-orca-run}
if [ -n "$ORCA_RUN_AS" ]; then
  id -u "$ORCA_RUN_AS" >/dev/null 2>&1 ||
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$ORCA_RUN_AS"
  for deny in /etc/cron.deny /etc/at.deny; do echo "$ORCA_RUN_AS" >>"$deny"; done
  if command -v iptables >/dev/null 2>&1; then
    iptables -C OUTPUT -m owner --uid-owner "$ORCA_RUN_AS" -d 169.254.169.254 -j REJECT 2>/dev/null ||
      iptables -A OUTPUT -m owner --uid-owner "$ORCA_RUN_AS" -d 169.254.169.254 -j REJECT
  else
    echo "orca: no iptables: runs can reach the metadata service" >&2
  fi
fi
set +e
(
  while true; do
    /usr/local/bin/orca scheduler >>/var/log/orca-scheduler.log 2>&1
    code=$?
    if [ "$code" = 0 ]; then
      echo "orca scheduler exited 0 (stopped or drained); not restarting" >>/var/log/orca-scheduler.log
      break
    fi
    echo "orca scheduler exited ($code); restarting" >>/var/log/orca-scheduler.log
    sleep 1
  done
) &
