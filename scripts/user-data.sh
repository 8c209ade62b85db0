#!/bin/sh
# EC2 user-data for a scheduler machine whose AMI has /usr/local/bin/orca:
# keeps one `orca scheduler` running, restarting it at once if it dies, but
# not after a clean exit 0 (with ORCA_OVERLAP=on: it drained for a newer one).
# Fill in the database URL (or fetch it from your secret store here).
export ORCA_DATABASE_URL='postgres://orca:CHANGE-ME@db.internal:5432/orca?sslmode=verify-full&sslrootcert=/etc/orca/ca.pem'
export ORCA_OVERLAP=on
export RUST_LOG=info
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
