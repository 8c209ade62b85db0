#!/usr/bin/env bash
# Checks one static binary `make static` built against the size budget and
# puts it where it ships from, with its sum beside it:
#
#   scripts/static-out.sh ARCH BINARY BUDGET
#
# Says the binary's size (bytes and MiB) and what ldd makes of it; fails
# (exit 1), naming the file and its size, when it is over BUDGET bytes.
# Otherwise copies it to target/static/orca-ARCH and writes
# target/static/orca-ARCH.sha256 in sha256sum's format, the file named
# without its directory (`cd target/static && sha256sum -c orca-ARCH.sha256`).
# Bad arguments: one line on stderr, exit 2.
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: scripts/static-out.sh ARCH BINARY BUDGET" >&2
  exit 2
fi
arch=$1 bin=$2 budget=$3
case $arch in
  x86_64 | aarch64) ;;
  *) echo "static-out.sh: unknown arch '$arch' (x86_64 or aarch64)" >&2; exit 2 ;;
esac
[[ $budget =~ ^[0-9]{1,12}$ ]] || { echo "static-out.sh: budget '$budget' is not a number of bytes" >&2; exit 2; }
[ -f "$bin" ] || { echo "static-out.sh: no binary at $bin" >&2; exit 2; }

size=$(stat -c %s "$bin")
mib=$(awk "BEGIN{printf \"%.2f\", $size/1048576}")
budget_mib=$(awk "BEGIN{printf \"%.2f\", $budget/1048576}")
echo "$bin: $size bytes ($mib MiB; budget $budget_mib MiB)"
# ldd of the host says "not a dynamic executable" of either (or cannot
# read the other arch's): what it says is shown, not judged.
ldd "$bin" 2>&1 | sed 's/^/ldd: /' || true
if [ "$size" -gt "$budget" ]; then
  echo "static-out.sh: $bin is over budget: $size bytes ($mib MiB) > $budget bytes ($budget_mib MiB)" >&2
  exit 1
fi
out=target/static
mkdir -p "$out"
cp "$bin" "$out/orca-$arch.tmp"
mv "$out/orca-$arch.tmp" "$out/orca-$arch"
(cd "$out" && sha256sum "orca-$arch" > "orca-$arch.sha256.tmp" && mv "orca-$arch.sha256.tmp" "orca-$arch.sha256")
echo "$out/orca-$arch: $(cut -d' ' -f1 "$out/orca-$arch.sha256")"
