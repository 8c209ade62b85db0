#!/usr/bin/env bash
# Installs what `make test` and `make demo` need beyond Rust, on Debian:
#
#   scripts/deps.sh test|demo|static
#
#   test  Postgres (server and psql), openssl (TLS tests), procps (pgrep),
#         systemd (systemctl and systemd-analyze read the shipped unit), jq
#         (the docs' monitoring check runs as written), man-db (`man -l`
#         renders the man pages `make install` installs),
#         docker-registry (a real OCI registry for the image tests), python3
#         with venv (the Dask engine test makes a virtualenv and installs from
#         PyPI), prometheus (a real Prometheus and promtool scrape and check
#         the scheduler's /metrics; installed with its service kept from
#         starting, so nothing takes :9090), qemu-user (tests/it/arm64.rs
#         runs the aarch64 binary under qemu-aarch64), and what `static` needs
#   demo  Postgres (server and psql)
#   static  gcc-aarch64-linux-gnu (ring's C and assembly for the aarch64
#         binary), and rustup's x86_64 and aarch64 musl targets (added with
#         rustup, as whoever runs it, not root's apt-get)
#
# Nothing is installed when everything is there. As root with apt-get it
# installs what is missing; otherwise, or with ORCA_NO_INSTALL=1, it prints the
# one command to run and exits 2. On a systemd host the Debian packages start
# their own services (postgresql on :5432, docker-registry on :5000); the
# tests use neither (they make clusters and registries of their own).
set -euo pipefail

what=${1:?usage: scripts/deps.sh test|demo|static}
need=()
# The musl targets `make static` builds for: added by rustup (as the user
# who builds) only when missing.
if [ "$what" = test ] || [ "$what" = static ]; then
  if command -v rustup >/dev/null; then
    installed=$(rustup target list --installed)
    for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
      grep -qx "$t" <<<"$installed" || rustup target add "$t" >&2
    done
  fi
  command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
fi
have_initdb() {
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && return 0
  [ -x "$(pg_config --bindir 2>/dev/null)/initdb" ]
}
if [ "$what" != static ]; then
  command -v psql >/dev/null || need+=(postgresql-client)
fi
# The demo needs a server only when it makes its own; some tests always
# make clusters of their own (restarts, TLS), whatever the database is.
if [ "$what" = test ] || { [ "$what" = demo ] && [ -z "${ORCA_TEST_DATABASE_URL:-}" ]; }; then
  have_initdb || need+=(postgresql)
fi
if [ "$what" = test ]; then
  command -v openssl >/dev/null || need+=(openssl)
  command -v pgrep >/dev/null || need+=(procps)
  command -v systemd-analyze >/dev/null && command -v systemctl >/dev/null || need+=(systemd)
  command -v jq >/dev/null || need+=(jq)
  command -v man >/dev/null || need+=(man-db)
  [ -x /usr/bin/docker-registry ] || need+=(docker-registry)
  command -v prometheus >/dev/null && command -v promtool >/dev/null || need+=(prometheus)
  command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
  if ! command -v python3 >/dev/null; then
    need+=(python3 python3-venv)
  elif ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    need+=(python3-venv)
  fi
elif [ "$what" != demo ] && [ "$what" != static ]; then
  echo "deps.sh: unknown target '$what' (test, demo or static)" >&2
  exit 2
fi

[ ${#need[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "deps.sh: make $what needs these Debian packages (or your system's equivalents): ${need[*]}" >&2
  exit 2
fi
cmd="apt-get install -y ${need[*]}"
if [ -z "${ORCA_NO_INSTALL:-}" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "deps.sh: installing ${need[*]}" >&2
  apt-get update -qq
  # Debian's prometheus would start its own service on :9090; the tests run
  # their own. A policy-rc.d that refuses starts (Debian's way, which
  # invoke-rc.d and deb-systemd-invoke obey) is put in place for its install
  # unless one is there already.
  rest=() promtool=()
  for p in "${need[@]}"; do
    if [ "$p" = prometheus ]; then promtool=(prometheus); else rest+=("$p"); fi
  done
  [ ${#rest[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${rest[@]}" >/dev/null
  if [ ${#promtool[@]} -gt 0 ]; then
    policy=/usr/sbin/policy-rc.d ours=
    if [ ! -e $policy ]; then
      printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy && ours=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${promtool[@]}" >/dev/null || { [ -z "$ours" ] || rm -f $policy; exit 1; }
    [ -z "$ours" ] || rm -f $policy
  fi
  exit 0
fi
[ "$(id -u)" = 0 ] || cmd="sudo $cmd"
echo "deps.sh: make $what needs ${need[*]}: run \`$cmd\`" >&2
exit 2
