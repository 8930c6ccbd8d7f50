#!/bin/sh
# copy-with-libs.sh [--libs-only] ROOT FILE...: copies each FILE (an absolute path) into ROOT at
# the same path, with every shared library `ldd` lists for it (and the dynamic loader), so that it
# runs in an image built FROM scratch. --libs-only copies the libraries alone. Symbolic links are
# followed: ROOT gets regular files.
set -eu
libs_only=false
if [ "$1" = --libs-only ]; then
    libs_only=true
    shift
fi
root=$1
shift
for file in "$@"; do
    # ldd lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
    # "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
    libs=$(ldd "$file" | sed -n 's/.*=> \(\/[^ ]*\).*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p')
    if [ "$libs_only" = false ]; then
        libs="$file $libs"
    fi
    for f in $libs; do
        mkdir -p "$root$(dirname "$f")"
        cp -L "$f" "$root$f"
    done
done
