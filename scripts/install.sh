#!/bin/sh
# `make install`: scripts/install.sh BIN DESTDIR PREFIX
# The binary to DESTDIR/PREFIX/bin/orca; the scheduler's systemd unit and
# user-data loop to DESTDIR/PREFIX/share/orca, naming PREFIX/bin/orca.
set -eu
bin=$1 dest=$2 prefix=$3
[ -f "$bin" ] || { echo "make install: $bin is missing: run \`make static\` first (or give BIN=target/release/orca)" >&2; exit 2; }
# PREFIX is written into the launchers (systemd's ExecStart, a shell line).
case $prefix in
  /*[!A-Za-z0-9/._+-]*|*[!A-Za-z0-9/._+-]*) bad=1 ;;
  /*) bad= ;;
  *) bad=1 ;;
esac
[ -z "$bad" ] || { echo "make install: PREFIX must be an absolute path of letters, digits and / . _ + - (not '$prefix')" >&2; exit 2; }
root=$dest$prefix
install -d "$root/bin" "$root/share/orca"
install -m 0755 "$bin" "$root/bin/orca"
# The launchers name the installed binary.
for f in orca-scheduler.service user-data.sh; do
  sed "s|/usr/local/bin/orca|$prefix/bin/orca|g" "$(dirname "$0")/$f" >"$root/share/orca/$f"
done
chmod 0644 "$root/share/orca/orca-scheduler.service"
chmod 0755 "$root/share/orca/user-data.sh"
echo "installed $root/bin/orca and $root/share/orca/{orca-scheduler.service,user-data.sh}"
