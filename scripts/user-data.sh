#!/bin/sh
# EC2 user-data for a scheduler machine whose AMI has /usr/local/bin/orca:
# keeps one `orca scheduler` running, restarting it at once if it dies.
# Fill in the database URL (or fetch it from your secret store here).
export ORCA_DATABASE_URL='postgres://orca:CHANGE-ME@db.internal:5432/orca?sslmode=verify-full&sslrootcert=/etc/orca/ca.pem'
export RUST_LOG=info
(
  while true; do
    /usr/local/bin/orca scheduler >>/var/log/orca-scheduler.log 2>&1
    echo "orca scheduler exited ($?); restarting" >>/var/log/orca-scheduler.log
    sleep 1
  done
) &
