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
# none, 1 when there are. With OLD_REF=<git ref> also (d) for each N, a
# database made by that ref's sql/migrations 1..N (as that ref's binary
# would have left it at N) and then migrated by NEW_ORCA, against (b).
# Needs ORCA_TEST_DATABASE_URL, a superuser's URL
# (scripts/test-db.sh sets it: scripts/test-db.sh scripts/schema-diff.sh
# /tmp/orca-old); makes a role and three databases (four with OLD_REF) of
# its own there and drops them. OLD_ORCA should know the same migrations
# but 0025 (orca.function_files), else their intended changes show as
# differences. Exit 2 when an orca migrate fails.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: scripts/schema-diff.sh OLD_ORCA [NEW_ORCA]}
new=${2:-target/debug/orca}
admin=${ORCA_TEST_DATABASE_URL:?set ORCA_TEST_DATABASE_URL to a superuser URL}
role=orca_schema_diff
pw=schema-diff-pw
# The server's URL with another user and database.
url() { echo "$admin" | sed -E "s#://[^@/]*@#://#; s#://#://$1@#; s#/[^/?]*(\?|$)#/$2\1#"; }
export PGOPTIONS='-c client_min_messages=warning'
sql() { psql "$admin" -X -q -v ON_ERROR_STOP=1 -c "$1" >/dev/null; }
out=$(mktemp -d)
cleanup() {
  for d in a b c d; do sql "DROP DATABASE IF EXISTS ${role}_$d" || true; done
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
dump() {
  pg_dump --schema-only --schema=orca --exclude-table=orca.function_files \
    "$(url "$role:$pw" "${role}_$1")" | grep -v -e '^-- Dumped' -e '^.restrict' -e '^.unrestrict'
}
if [ -n "${OLD_REF:-}" ]; then
  files=$(git ls-tree --name-only "$OLD_REF" sql/migrations/ | sort)
  for n in $(seq 1 "$(echo "$files" | wc -l)"); do
    sql "DROP DATABASE IF EXISTS ${role}_d"
    sql "CREATE DATABASE ${role}_d OWNER $role"
    {
      echo 'BEGIN;'; cat sql/migrations_table.sql; echo '; COMMIT;'
      for f in $(echo "$files" | head -"$n"); do
        echo 'BEGIN;'; git show "$OLD_REF:$f"
        echo ";INSERT INTO orca.migrations (version, name) VALUES ($((10#$(basename "$f" | cut -c1-4))), 'as $OLD_REF had it'); COMMIT;"
      done
    } | psql "$(url "$role:$pw" "${role}_d")" -X -q -v ON_ERROR_STOP=1 >/dev/null
    migrate "$new" d
    if ! dump d | diff -u "$out/b.sql" - --label "fresh, $new" --label "$OLD_REF at $n, then $new"; then rc=1; fi
  done
  echo "schema-diff.sh: $n databases made by $OLD_REF's migrations 1..N, then migrated by $new, compared"
fi
[ $rc = 0 ] && echo "schema-diff.sh: the three schemas are identical ($(grep -c '^CREATE' "$out/a.sql") CREATE statements)"
exit $rc
