#!/bin/sh
# collect-rootfs.sh BINARY ROOT: lays out a minimal image root for BINARY in ROOT — the binary
# as /usr/local/bin/convoke with the shared libraries it loads, /etc/passwd and /etc/group for
# the unprivileged user 10001 ("convoke"), a /tmp, and the system's CA bundle when there is one
# (HTTPS probes and the Kubernetes client without an explicit CA file).
set -eu
binary=$1
root=$2
here=$(dirname "$0")

rm -rf "$root"
mkdir -p "$root/usr/local/bin" "$root/etc" "$root/tmp"
chmod 1777 "$root/tmp"
cp "$binary" "$root/usr/local/bin/convoke"
sh "$here/copy-with-libs.sh" --libs-only "$root" "$binary"
strip "$root/usr/local/bin/convoke" 2>/dev/null || true

echo 'root:x:0:0:root:/:/sbin/nologin' > "$root/etc/passwd"
echo 'convoke:x:10001:10001:convoke:/tmp:/sbin/nologin' >> "$root/etc/passwd"
printf 'root:x:0:\nconvoke:x:10001:\n' > "$root/etc/group"

if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    mkdir -p "$root/etc/ssl/certs"
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
fi
