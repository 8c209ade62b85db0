#!/usr/bin/env bash
# Regenerates src/db/sql.rs: one constant per file in sql/ (not migrations),
# in byte order of their names, and FUNCTIONS: every file of sql/functions/.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
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
  echo
  echo '/// Every function of schema `orca`, by name: its current definition (every'
  echo '/// overload, its settings and grants), one file each under `sql/functions/`,'
  echo '/// applied by `orca migrate` when it changed (`db::migrate`).'
  echo 'pub const FUNCTIONS: &[(&str, &str)] = &['
  for f in sql/functions/*.sql; do
    n=$(basename "$f" .sql)
    echo "    (\"$n\", sql_file!(\"functions/$n.sql\")),"
  done
  echo '];'
} > src/db/sql.rs
# As `cargo fmt` leaves it, so that regenerating gives the same file.
rustfmt --edition 2024 src/db/sql.rs
