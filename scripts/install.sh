#!/bin/sh
# `make install`: scripts/install.sh BIN DESTDIR PREFIX UNITDIR GEN
# The binary to DESTDIR/PREFIX/bin/orca; the scheduler's systemd unit to
# DESTDIR/UNITDIR (where systemd finds it) and its user-data loop to
# DESTDIR/PREFIX/share/orca, both naming PREFIX/bin/orca; the shell
# completions and man pages `make docs-gen` wrote under GEN to where bash,
# zsh, fish and man look under DESTDIR/PREFIX/share.
set -eu
bin=$1 dest=$2 prefix=$3 unitdir=$4 gen=$5
[ -f "$bin" ] || { echo "make install: $bin is missing: run \`make static\` first (or give BIN=target/release/orca)" >&2; exit 2; }
[ -f "$gen/man/man1/orca.1" ] || { echo "make install: $gen has no man pages: run \`make docs-gen\` first" >&2; exit 2; }
# PREFIX is written into the launchers (systemd's ExecStart, a shell line).
for dir in "PREFIX=$prefix" "UNITDIR=$unitdir"; do
  value=${dir#*=}
  case $value in
    /*[!A-Za-z0-9/._+-]*|*[!A-Za-z0-9/._+-]*) bad=1 ;;
    /*) bad= ;;
    *) bad=1 ;;
  esac
  [ -z "$bad" ] || { echo "make install: ${dir%%=*} must be an absolute path of letters, digits and / . _ + - (not '$value')" >&2; exit 2; }
done
install -d "$dest$prefix/bin" "$dest$prefix/share/orca" "$dest$unitdir"
install -m 0755 "$bin" "$dest$prefix/bin/orca"
# The launchers name the installed binary.
sed "s|/usr/local/bin/orca|$prefix/bin/orca|g" "$(dirname "$0")/orca-scheduler.service" >"$dest$unitdir/orca-scheduler.service"
sed "s|/usr/local/bin/orca|$prefix/bin/orca|g" "$(dirname "$0")/user-data.sh" >"$dest$prefix/share/orca/user-data.sh"
chmod 0644 "$dest$unitdir/orca-scheduler.service"
chmod 0755 "$dest$prefix/share/orca/user-data.sh"
share=$dest$prefix/share
install -d "$share/bash-completion/completions" "$share/zsh/site-functions" \
  "$share/fish/vendor_completions.d" "$share/man/man1"
install -m 0644 "$gen/bash-completion/completions/orca" "$share/bash-completion/completions/orca"
install -m 0644 "$gen/zsh/site-functions/_orca" "$share/zsh/site-functions/_orca"
install -m 0644 "$gen/fish/vendor_completions.d/orca.fish" "$share/fish/vendor_completions.d/orca.fish"
install -m 0644 "$gen"/man/man1/*.1 "$share/man/man1/"
echo "installed $dest$prefix/bin/orca, $dest$unitdir/orca-scheduler.service, $dest$prefix/share/orca/user-data.sh, and completions and man pages under $share"
[ -n "$dest" ] || ! command -v systemctl >/dev/null 2>&1 || [ ! -d /run/systemd/system ] || systemctl daemon-reload || true
