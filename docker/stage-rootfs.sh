#!/bin/sh
# Fills the image root (argument 1) with the convoke binary, every shared library it loads,
# and passwd/group entries for user 10001. Runs inside the Dockerfile's build stage.
# With $PREBUILT set (the offline path), copies that already staged root instead of compiling.
set -eu
root=$1

if [ -n "${PREBUILT:-}" ]; then
    cp -a "$PREBUILT" "$root"
    exit 0
fi

cargo build --release --locked --bin convoke
sh docker/collect-rootfs.sh target/release/convoke "$root"
