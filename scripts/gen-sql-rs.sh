#!/usr/bin/env bash
# Regenerates src/db/sql.rs: one constant per file in sql/ (not migrations).
set -euo pipefail
cd "$(dirname "$0")/.."
{
  echo '//! Every statement orca runs, one `.sql` file each under `sql/` (the file'
  echo '//! says what it does and what its parameters are), embedded at build time'
  echo '//! without its whole-line comments (`sql_file!`, `build.rs`).'
  echo '//! Values always go in as bind parameters (`$1`, `$2`, ...). Regenerate'
  echo '//! with `scripts/gen-sql-rs.sh` after adding a file.'
  for f in sql/*.sql; do
    n=$(basename "$f" .sql)
    echo
    echo "/// See \`sql/$n.sql\`."
    echo "pub const ${n^^}: &str = sql_file!(\"$n.sql\");"
  done
} > src/db/sql.rs
