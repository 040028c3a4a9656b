#!/usr/bin/env bash
# Installs everything flamme needs on a fresh Debian 12 machine:
#   - Debian packages (compiler, zlib, libunwind, tools used by tests)
#   - OCaml 5.3.0 built from the npm registry's `ocaml@5.3.0` source package,
#     configured with --enable-frame-pointers, into a cache outside the tree,
#     and a second one without frame pointers (what a default opam switch is).
# Idempotent: a second run only checks that things are present.
# Env: FLAMME_CACHE (default $HOME/.cache/flamme), FLAMME_OCAML_VERSION.
set -euo pipefail

CACHE="${FLAMME_CACHE:-$HOME/.cache/flamme}"
VER="${FLAMME_OCAML_VERSION:-5.3.0}"
PREFIX="$CACHE/ocaml-$VER-fp"

need_pkgs=()
for p in gcc make zlib1g-dev libunwind-dev pkg-config python3 binutils chromium libc6-dbg ocaml-dune; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need_pkgs+=("$p")
done
# npm may come from Debian's nodejs/npm or another node install: test the command.
command -v npm >/dev/null 2>&1 || need_pkgs+=(npm)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
    echo "deps: installing Debian packages: ${need_pkgs[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# build_ocaml PREFIX FLAGS: builds the npm source package into PREFIX.
build_ocaml() {
    local prefix="$1"; shift
    echo "deps: building OCaml $VER ($*) into $prefix (about 6 minutes, once)"
    mkdir -p "$CACHE"
    local work
    work="$(mktemp -d "$CACHE/build.XXXXXX")"
    ( cd "$work" && npm pack --silent "ocaml@$VER" >/dev/null )
    local tgz
    tgz="$(ls "$work"/ocaml-*.tgz | head -1)"
    mkdir "$work/src"
    tar -xzf "$tgz" -C "$work/src" --strip-components=1
    ( cd "$work/src" &&
      ./configure "$@" --prefix="$prefix" >"$work/configure.log" 2>&1 ||
        { tail -30 "$work/configure.log"; echo "deps: configure failed" >&2; exit 1; }
      make -j"$(nproc)" >"$work/make.log" 2>&1 ||
        { tail -30 "$work/make.log"; echo "deps: OCaml build failed" >&2; exit 1; }
      make install >"$work/install.log" 2>&1 ||
        { tail -30 "$work/install.log"; echo "deps: OCaml install failed" >&2; exit 1; } ) ||
        { rm -rf "$work"; exit 1; }
    rm -rf "$work"
}

if [ -x "$PREFIX/bin/ocamlopt" ] && "$PREFIX/bin/ocamlopt" -config | grep -q '^with_frame_pointers: true'; then
    echo "deps: OCaml $VER (frame pointers) present in $PREFIX"
else
    build_ocaml "$PREFIX" --enable-frame-pointers
    "$PREFIX/bin/ocamlopt" -config | grep -q '^with_frame_pointers: true' \
        || { echo "deps: built compiler lacks frame pointers" >&2; exit 1; }
    echo "deps: OCaml $VER installed in $PREFIX"
fi

# The default opam switch has no frame pointers; most users profile such
# binaries, so the tests build some programs with this one as well.
NOFP="$CACHE/ocaml-$VER-nofp"
if [ -x "$NOFP/bin/ocamlopt" ]; then
    echo "deps: OCaml $VER (no frame pointers) present in $NOFP"
else
    build_ocaml "$NOFP"
    echo "deps: OCaml $VER (no frame pointers) installed in $NOFP"
fi
