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
#
# The worker is started again a second after it fails. Stopped (exit 0, after
# SIGTERM), it stays stopped; its login refused (exit 3: its credentials
# revoked, the machine removed; or refused for ORCA_WORKER_REFUSED_SECONDS,
# a pg_hba.conf line, say), the machine shuts down: the worker's last line
# says what the database said, and the scaler removes the machine once it
# is gone.
bin=${ORCA_BIN:-orca}
# (Run after scripts/machine-prelude.sh: the token file, ORCA_RUN_AS, the
# metadata block.)
while :; do
  "$bin" worker --pool "$ORCA_POOL"
  code=$?
  if [ "$code" -eq 0 ]; then
    echo "orca boot: the worker was stopped: not starting it again" >&2
    exit 0
  fi
  if [ "$code" -eq 3 ]; then
    echo "orca boot: this machine's login was refused (the worker's last line says what the database said): shutting down" >&2
    ${ORCA_SHUTDOWN:-shutdown -h now}
    exit 0
  fi
  echo "orca boot: the worker exited with $code: starting it again" >&2
  sleep 1
done
