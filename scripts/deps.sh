#!/usr/bin/env bash
# Installs everything flamme needs on a fresh Debian 12 machine:
#   - Debian packages (compiler, zlib, libunwind, tools used by tests)
#   - OCaml 5.3.0 built from the npm registry's `ocaml@5.3.0` source package,
#     configured with --enable-frame-pointers, into a cache outside the tree;
#   - unless --demo: a second 5.3.0 without frame pointers (what a default
#     opam switch is), and OCaml 5.1.0 with frame pointers (npm `ocaml@5.1.4`,
#     whose VERSION file says 5.1.0), the oldest release flamme supports;
#     and OCaml 5.4.1 without frame pointers (what a default opam switch
#     has had since late 2025; npm has no 5.4, Debian's archive has its
#     source, checked against its SHA-256), and OCaml 5.5.2 without frame
#     pointers (the newest release, from Debian's experimental suite); the
#     tests run on all five.
# `make demo` runs `deps.sh --demo`: the one compiler the demo needs.
# Idempotent: a second run only checks that things are present.
# Env: FLAMME_CACHE (default $HOME/.cache/flamme), FLAMME_OCAML_VERSION.
set -euo pipefail

DEMO_ONLY=0
[ "${1:-}" = "--demo" ] && DEMO_ONLY=1
CACHE="${FLAMME_CACHE:-$HOME/.cache/flamme}"
VER="${FLAMME_OCAML_VERSION:-5.3.0}"
PREFIX="$CACHE/ocaml-$VER-fp"
# The oldest supported release: npm package version -> OCaml version.
OLD_NPM=5.1.4
OLD_VER=5.1.0

need_pkgs=()
for p in gcc make zlib1g-dev libunwind-dev libcurl4-openssl-dev pkg-config python3 binutils chromium libc6-dbg ocaml-dune curl xz-utils; do
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
# For the tests only: `opam lint` of flamme.opam, ocamlfind to link the
# installed OCaml library as its users do, and afl++ for make fuzz/fuzz-ci
# (it brings clang, whose sanitizers the fuzz harness uses), tmux for make
# top-test (a terminal to drive flamme top in), python3-pytest (make test
# runs the suite through it: tests/conftest.py), golang-go (`go tool pprof`
# reads the pprof exports in tests/export, alloc and live). Without
# recommends: opam would bring Debian's OCaml 4.13 compiler (ocamlfind runs
# whichever ocamlopt is first in PATH; the tests put a 5.x one there).
if [ "$DEMO_ONLY" = 0 ]; then
    need_test=()
    for p in opam ocaml-findlib afl++ tmux python3-pytest golang-go; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need_test+=("$p")
    done
    if [ "${#need_test[@]}" -gt 0 ]; then
        echo "deps: installing Debian packages for the tests: ${need_test[*]}"
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
            "${need_test[@]}" >/dev/null
    fi
fi

# build_ocaml SOURCE PREFIX FLAGS: builds OCaml into PREFIX from SOURCE:
# an npm version of the source package `ocaml` (5.3.0), or a tarball
# already fetched (a path ending in .tar.xz or .tar.gz).
build_ocaml() {
    local source="$1" prefix="$2"; shift 2
    echo "deps: building OCaml from $source ($*) into $prefix (about 6 minutes, once)"
    mkdir -p "$CACHE"
    local work
    work="$(mktemp -d "$CACHE/build.XXXXXX")"
    mkdir "$work/src"
    if [[ "$source" == *.tar.xz || "$source" == *.tar.gz ]]; then
        tar -xaf "$source" -C "$work/src" --strip-components=1
    else
        ( cd "$work" && npm pack --silent "ocaml@$source" >/dev/null )
        local tgz
        tgz="$(ls "$work"/ocaml-*.tgz | head -1)"
        tar -xzf "$tgz" -C "$work/src" --strip-components=1
    fi
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
    build_ocaml "$VER" "$PREFIX" --enable-frame-pointers
    "$PREFIX/bin/ocamlopt" -config | grep -q '^with_frame_pointers: true' \
        || { echo "deps: built compiler lacks frame pointers" >&2; exit 1; }
    echo "deps: OCaml $VER installed in $PREFIX"
fi

[ "$DEMO_ONLY" = 1 ] && exit 0

# The default opam switch has no frame pointers; most users profile such
# binaries, so the tests build some programs with this one as well.
NOFP="$CACHE/ocaml-$VER-nofp"
if [ -x "$NOFP/bin/ocamlopt" ]; then
    echo "deps: OCaml $VER (no frame pointers) present in $NOFP"
else
    build_ocaml "$VER" "$NOFP"
    echo "deps: OCaml $VER (no frame pointers) installed in $NOFP"
fi

# For the tests only: speedscope, to open flamme's exports in headless chromium.
SPEEDSCOPE_VER=1.25.0
if [ "$DEMO_ONLY" = 0 ]; then
    if grep -qs "\"version\": \"$SPEEDSCOPE_VER\"" "$CACHE/speedscope/node_modules/speedscope/package.json"; then
        echo "deps: speedscope $SPEEDSCOPE_VER present in $CACHE/speedscope"
    else
        mkdir -p "$CACHE/speedscope"
        npm install --silent --no-audit --no-fund --prefix "$CACHE/speedscope" "speedscope@$SPEEDSCOPE_VER" >/dev/null \
            || { echo "deps: npm speedscope@$SPEEDSCOPE_VER did not install" >&2; exit 1; }
        echo "deps: speedscope $SPEEDSCOPE_VER installed in $CACHE/speedscope"
    fi
fi

# The oldest release flamme supports (its runtime layout is checked by the
# agent at start): the e2e, fidelity and library tests run on it too.
OLD="$CACHE/ocaml-$OLD_VER-fp"
if [ -x "$OLD/bin/ocamlopt" ] && [ "$("$OLD/bin/ocamlopt" -version)" = "$OLD_VER" ]; then
    echo "deps: OCaml $OLD_VER (frame pointers) present in $OLD"
else
    build_ocaml "$OLD_NPM" "$OLD" --enable-frame-pointers
    [ "$("$OLD/bin/ocamlopt" -version)" = "$OLD_VER" ] \
        || { echo "deps: npm ocaml@$OLD_NPM did not build OCaml $OLD_VER" >&2; exit 1; }
    echo "deps: OCaml $OLD_VER (frame pointers) installed in $OLD"
fi

# OCaml 5.4 without frame pointers: the release most default opam switches
# run now. npm has no 5.4; its source is the orig tarball of Debian's ocaml
# 5.4.1-1 (forky/sid), fetched from Debian's archive and checked against the
# SHA-256 that Debian's Sources index gives for it. Once Debian moves on and
# drops that file, the 5.4.x Debian's signed index names is taken instead.
DEBIAN=http://deb.debian.org/debian
NEW_VER=5.4.1
NEW_SHA256=b1e297adc186635540758eb064c7fab025598ae4436f3b9767e5025188b4e0ab
NEW_FILE="ocaml_$NEW_VER.orig.tar.xz"

# debian_ocaml_54 DIR: sets NEW_VER, PIN_SHA256 and PIN_FILE from the ocaml
# 5.4.x source package of Debian's forky or sid, read from their Sources
# index (its SHA-256 from the suite's InRelease, whose signature gpgv checks
# with Debian's archive keyring). Returns 1 when none is found.
debian_ocaml_54() {
    local dir="$1" suite sum found
    for suite in forky sid; do
        curl -fsS --retry 3 -o "$dir/InRelease" "$DEBIAN/dists/$suite/InRelease" || continue
        gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg -o "$dir/Release" \
            "$dir/InRelease" 2>/dev/null || continue
        sum="$(awk '/^SHA256:/ {s=1; next} /^[^ ]/ {s=0} s && $3 == "main/source/Sources.xz" {print $1}' \
            "$dir/Release")"
        [ -n "$sum" ] || continue
        curl -fsS --retry 3 -o "$dir/Sources.xz" "$DEBIAN/dists/$suite/main/source/Sources.xz" || continue
        echo "$sum  $dir/Sources.xz" | sha256sum -c --status || continue
        found="$(xz -dc "$dir/Sources.xz" | awk '
            /^Package: / {pkg=$2; ver=""; s=0}
            pkg == "ocaml" && /^Version: 5\.4\./ {ver=$2}
            pkg == "ocaml" && ver != "" && /^Checksums-Sha256:/ {s=1; next}
            s && /^ / && $3 ~ /^ocaml_5\.4\.[0-9]+\.orig\.tar\.xz$/ {print $1, $3; s=0}
            /^[^ ]/ {s=0}' | sort -k2 -V | tail -1)"
        [ -n "$found" ] || continue
        PIN_SHA256="${found%% *}"
        PIN_FILE="${found#* }"
        NEW_VER="${PIN_FILE#ocaml_}"
        NEW_VER="${NEW_VER%.orig.tar.xz}"
        return 0
    done
    return 1
}

# fetch_checked FILE SHA256 DEST: DEST is Debian's pool file FILE with that SHA-256.
fetch_checked() {
    echo "$2  $3" | sha256sum -c --status 2>/dev/null && return 0
    curl -fsS --retry 3 -o "$3.part" "$DEBIAN/pool/main/o/ocaml/$1" || return 1
    echo "$2  $3.part" | sha256sum -c --status || { rm -f "$3.part"; return 1; }
    mv "$3.part" "$3"
}

# fetch_pinned RELEASE LOOKUP SUITES: $CACHE/$PIN_FILE is Debian's pool file
# PIN_FILE with the SHA-256 PIN_SHA256. When Debian no longer serves it,
# LOOKUP DIR (a function) sets PIN_FILE and PIN_SHA256 from Debian's signed
# index of SUITES to another file of that RELEASE. Exits on failure.
fetch_pinned() {
    mkdir -p "$CACHE"
    fetch_checked "$PIN_FILE" "$PIN_SHA256" "$CACHE/$PIN_FILE" && return 0
    echo "deps: $DEBIAN/pool/main/o/ocaml/$PIN_FILE: not fetched; asking Debian's index for another $1"
    local idx
    idx="$(mktemp -d "$CACHE/index.XXXXXX")"
    "$2" "$idx" || { rm -rf "$idx"; echo "deps: no OCaml $1 source in Debian's $3" >&2; exit 1; }
    rm -rf "$idx"
    fetch_checked "$PIN_FILE" "$PIN_SHA256" "$CACHE/$PIN_FILE" \
        || { echo "deps: cannot fetch $DEBIAN/pool/main/o/ocaml/$PIN_FILE with Debian's SHA-256" >&2; exit 1; }
}

if ls "$CACHE"/ocaml-5.4.*-nofp/bin/ocamlopt >/dev/null 2>&1; then
    echo "deps: OCaml 5.4 (no frame pointers) present in $(ls -d "$CACHE"/ocaml-5.4.*-nofp | head -1)"
else
    PIN_FILE="$NEW_FILE" PIN_SHA256="$NEW_SHA256"
    fetch_pinned 5.4 debian_ocaml_54 "forky or sid"
    NEW="$CACHE/ocaml-$NEW_VER-nofp"
    build_ocaml "$CACHE/$PIN_FILE" "$NEW"
    [ "$("$NEW/bin/ocamlopt" -version)" = "$NEW_VER" ] \
        || { echo "deps: $PIN_FILE did not build OCaml $NEW_VER" >&2; exit 1; }
    echo "deps: OCaml $NEW_VER (no frame pointers) installed in $NEW"
fi

# OCaml 5.5 without frame pointers: the newest release, what `opam switch
# create` picks now. npm has none, and Debian's pool serves no 5.5 orig
# tarball; its experimental suite's binary package ocaml-source carries the
# orig tarball (inside a tar, beside Debian's patches, which are not
# applied). The .deb is checked against the SHA-256 of experimental's
# Packages index, the tarball in it against the one its Sources index gives.
# Once experimental moves on and drops that .deb, the newest 5.5.x
# ocaml-source that the signed index of experimental, sid or forky names is
# taken instead (its .deb checked, the tarball in it then trusted).
LATEST_VER=5.5.2
LATEST_DEB="ocaml-source_5.5.2-1~exp1_all.deb"
LATEST_DEB_SHA256=ee006de0cdfe78a1997e808abce49caa68e63e56704d768f02baea725b2da8e9
LATEST_TAR_SHA256=0b2fa96469edb7dd770afba8bcab72808ebb308fe5d3b9379f42d7956523fa86

# debian_ocaml_source DIR: sets LATEST_VER, PIN_FILE and PIN_SHA256 (and
# clears LATEST_TAR_SHA256) from the newest ocaml-source 5.5.x of
# Debian's experimental, sid or forky Packages index (its SHA-256 from the
# suite's InRelease, whose signature gpgv checks with Debian's archive
# keyring). Returns 1 when none is found.
debian_ocaml_source() {
    local dir="$1" suite sum found
    for suite in experimental sid forky; do
        curl -fsS --retry 3 -o "$dir/InRelease" "$DEBIAN/dists/$suite/InRelease" || continue
        gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg -o "$dir/Release" \
            "$dir/InRelease" 2>/dev/null || continue
        sum="$(awk '/^SHA256:/ {s=1; next} /^[^ ]/ {s=0} s && $3 == "main/binary-amd64/Packages.xz" {print $1}' \
            "$dir/Release")"
        [ -n "$sum" ] || continue
        curl -fsS --retry 3 -o "$dir/Packages.xz" "$DEBIAN/dists/$suite/main/binary-amd64/Packages.xz" || continue
        echo "$sum  $dir/Packages.xz" | sha256sum -c --status || continue
        found="$(xz -dc "$dir/Packages.xz" | awk '
            /^Package: / {pkg=$2; ver=""; file=""}
            pkg == "ocaml-source" && /^Version: 5\.5\./ {ver=$2}
            pkg == "ocaml-source" && ver != "" && /^Filename: / {file=$2}
            pkg == "ocaml-source" && file != "" && /^SHA256: / {print ver, $2, file; file=""}' |
            sort -k1 -V | tail -1)"
        [ -n "$found" ] || continue
        read -r LATEST_VER PIN_SHA256 PIN_FILE <<<"$found"
        PIN_FILE="${PIN_FILE##*/}"
        LATEST_VER="${LATEST_VER%%-*}"
        LATEST_TAR_SHA256=""
        return 0
    done
    return 1
}

if ls "$CACHE"/ocaml-5.5.*-nofp/bin/ocamlopt >/dev/null 2>&1; then
    echo "deps: OCaml 5.5 (no frame pointers) present in $(ls -d "$CACHE"/ocaml-5.5.*-nofp | head -1)"
else
    PIN_FILE="$LATEST_DEB" PIN_SHA256="$LATEST_DEB_SHA256"
    fetch_pinned 5.5 debian_ocaml_source "experimental, sid or forky"
    LATEST_DEB="$PIN_FILE"
    # The .deb's data: usr/src/ocaml-source-VER.tar, which holds
    # ocaml-VER/ocaml_VER.orig.tar.{gz,xz}.
    x="$(mktemp -d "$CACHE/source.XXXXXX")"
    dpkg-deb -x "$CACHE/$LATEST_DEB" "$x" && tar -xf "$x/usr/src/ocaml-source-$LATEST_VER.tar" -C "$x" \
        || { rm -rf "$x"; echo "deps: $LATEST_DEB does not hold ocaml-source-$LATEST_VER.tar" >&2; exit 1; }
    tarball="$(ls "$x/ocaml-$LATEST_VER"/ocaml_"$LATEST_VER".orig.tar.* 2>/dev/null | head -1)"
    if [ -z "$tarball" ] || { [ -n "$LATEST_TAR_SHA256" ] &&
        ! echo "$LATEST_TAR_SHA256  $tarball" | sha256sum -c --status; }; then
        rm -rf "$x"; echo "deps: $LATEST_DEB: no orig tarball of $LATEST_VER with Debian's SHA-256 in it" >&2; exit 1
    fi
    LATEST="$CACHE/ocaml-$LATEST_VER-nofp"
    build_ocaml "$tarball" "$LATEST" # exits on failure
    rm -rf "$x"
    [ "$("$LATEST/bin/ocamlopt" -version)" = "$LATEST_VER" ] \
        || { echo "deps: $LATEST_DEB did not build OCaml $LATEST_VER" >&2; exit 1; }
    echo "deps: OCaml $LATEST_VER (no frame pointers) installed in $LATEST"
fi
