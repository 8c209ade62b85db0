#!/usr/bin/env bash
# Compares the schema `orca` as three `orca migrate`s leave it:
#
#   scripts/schema-diff.sh OLD_ORCA [NEW_ORCA]
#
# (a) a fresh database migrated by OLD_ORCA (an older build), (b) one
# migrated by NEW_ORCA (default target/debug/orca), (c) one migrated by
# OLD_ORCA and then by NEW_ORCA; each `pg_dump --schema-only --schema=orca`,
# without NEW_ORCA's table of function versions (orca.function_files).
# Prints the differences of (b) and (c) from (a); exit 0 when there are
# none, 1 when there are. Needs ORCA_TEST_DATABASE_URL, a superuser's URL
# (scripts/test-db.sh sets it: scripts/test-db.sh scripts/schema-diff.sh
# /tmp/orca-old); makes a role and three databases of its own there and
# drops them.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: scripts/schema-diff.sh OLD_ORCA [NEW_ORCA]}
new=${2:-target/debug/orca}
admin=${ORCA_TEST_DATABASE_URL:?set ORCA_TEST_DATABASE_URL to a superuser URL}
role=orca_schema_diff
pw=schema-diff-pw
# The server's URL with another user and database.
url() { echo "$admin" | sed -E "s#://[^@/]*@#://#; s#://#://$1@#; s#/[^/?]*(\?|$)#/$2\1#"; }
sql() { psql "$admin" -X -q -v ON_ERROR_STOP=1 -c "$1" >/dev/null; }
out=$(mktemp -d)
cleanup() {
  for d in a b c; do sql "DROP DATABASE IF EXISTS ${role}_$d" || true; done
  sql "DROP ROLE IF EXISTS $role" || true
  rm -rf "$out"
}
trap cleanup EXIT
sql "DO \$\$ BEGIN CREATE ROLE $role LOGIN CREATEROLE PASSWORD '$pw' IN ROLE pg_signal_backend;
     EXCEPTION WHEN duplicate_object THEN NULL; END \$\$"
migrate() { ORCA_DATABASE_URL=$(url "$role:$pw" "${role}_$2") "$1" migrate >/dev/null 2>&1 ||
  { echo "schema-diff.sh: $1 migrate failed on ${role}_$2" >&2; exit 2; }; }
for d in a b c; do sql "CREATE DATABASE ${role}_$d OWNER $role"; done
migrate "$old" a
migrate "$new" b
migrate "$old" c
migrate "$new" c
for d in a b c; do
  pg_dump --schema-only --schema=orca --exclude-table=orca.function_files \
    "$(url "$role:$pw" "${role}_$d")" | grep -v -e '^-- Dumped' -e '^.restrict' -e '^.unrestrict' >"$out/$d.sql"
done
rc=0
for d in b c; do
  if ! diff -u "$out/a.sql" "$out/$d.sql" --label "fresh, $old" --label "$( [ $d = b ] && echo "fresh, $new" || echo "$old, then $new")"; then rc=1; fi
done
[ $rc = 0 ] && echo "schema-diff.sh: the three schemas are identical ($(grep -c '^CREATE' "$out/a.sql") CREATE statements)"
exit $rc
