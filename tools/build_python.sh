#!/usr/bin/env bash
# Build CPython from source, with the GIL (`3.13`) or free-threaded (`3.13t`, PEP 703,
# `--disable-gil`), and a virtualenv with torch, memprobe (editable, from this checkout) and its
# test extras, from the package registries this machine reaches (Debian's source packages and
# PyPI). Then `make test-python PYTHON=<the venv's python>` runs the suite with it. Not part of
# `make test`: each interpreter takes 10-30 minutes of CPU and ~6 GB of disk (torch's CUDA build).
#
#   bash tools/build_python.sh 3.13 3.13t        # both, one after the other, into /work/pythons
#   bash tools/build_python.sh --test 3.13       # and run the suite with it (make test-python)
#   PYTHONS=/some/dir bash tools/build_python.sh 3.13t
#
# Layout under $PYTHONS: src/ (Debian's source package and the extracted upstream tree, shared by
# both builds of a version), and per interpreter TAG/ with build/ (an out-of-tree build),
# prefix/ (make altinstall), venv/, wheels/, stamps/ and the logs.
#
# Each step leaves a stamp file; a step whose stamp exists is skipped, so the script can be run
# again after a failure and goes on where it stopped (delete a stamp to redo its step).
#
# Why these versions (checked 2026-11-26 and 2026-11-29): Debian ships no free-threaded
# interpreter and no 3.13 on this machine's release, so the upstream tarball inside Debian's
# `python3.13` source package (`*.orig.tar.xz`: CPython's own release, Debian's patches are not
# applied) is built. Only 3.13.15's files could be fetched here (the newer 3.13 and every 3.14
# source package listed by the registry's index gave 404; no 3.10 or 3.12 source package is
# listed). torch: for cp313 the version of constraints/cpu.txt (the one `make test` runs on
# 3.11), PyPI's CUDA build (the CPU build on this disk is for 3.11 only); for cp313t the newest
# torch with cp313t wheels, 2.10 (2.13 has cp314t but none for cp313t). PyPI's Linux torch is
# the CUDA build, which runs on the CPU here.
#
# Environment knobs: PYTHONS (default /work/pythons), DEB_VERSION (3.13.15-1),
# TORCH_VERSION (per tag, above), JOBS (2), NICE (15).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUN_TESTS=
if [[ "${1:-}" == --test ]]; then RUN_TESTS=1; shift; fi
if [[ $# -eq 0 ]]; then
    echo "usage: bash tools/build_python.sh [--test] TAG... (TAG: 3.13 with the GIL, 3.13t free-threaded)" >&2
    exit 2
fi
if [[ $# -gt 1 ]]; then
    for tag in "$@"; do bash "${BASH_SOURCE[0]}" ${RUN_TESTS:+--test} "$tag"; done
    exit 0
fi

TAG=$1
case "$TAG" in
    3.1[0-9]t) FREE=1 MINOR=${TAG%t} ;;
    3.1[0-9]) FREE= MINOR=$TAG ;;
    *) echo "error: unknown interpreter '$TAG' (allowed: 3.13, 3.13t and the like)" >&2; exit 2 ;;
esac
PYTHONS=${PYTHONS:-/work/pythons}
DEB_PKG=python$MINOR
case "$MINOR" in
    3.13) DEB_VERSION=${DEB_VERSION:-3.13.15-1} ;;
    *) [[ -n "${DEB_VERSION:-}" ]] || {
        echo "error: no known Debian source package for $MINOR: set DEB_VERSION (e.g. 3.14.10-1)" >&2; exit 2; } ;;
esac
if [[ -n "$FREE" ]]; then
    TORCH_VERSION=${TORCH_VERSION:-2.10.0}
else
    TORCH_VERSION=${TORCH_VERSION:-$(sed -n 's/^torch==//p' "$REPO/constraints/cpu.txt")}
fi
JOBS=${JOBS:-2}
NICE=${NICE:-15}

UPSTREAM=${DEB_VERSION%-*}   # 3.13.15
HERE=$PYTHONS/$TAG
BUILD=$HERE/build
PREFIX=$HERE/prefix
PY=$PREFIX/bin/python$MINOR${FREE:+t}
VENV=$HERE/venv
STAMPS=$HERE/stamps
SRCDIR=$PYTHONS/src
SRC=$SRCDIR/Python-$UPSTREAM
mkdir -p "$HERE" "$STAMPS" "$SRCDIR/stamps"

say() { printf '[build_python %s %s] %s\n' "$TAG" "$(date -u +%H:%M:%S)" "$*"; }
done_step() { [[ -e "$1" ]]; }
mark() { date -u +%FT%TZ >"$1"; }

# 1. The source, shared by the builds of one version: `apt-get source --download-only` with an
#    apt configuration of our own (only a deb-src line for Debian unstable, built from the mirror
#    the system already uses), so the system's sources are not touched.
if ! done_step "$SRCDIR/stamps/source-$DEB_VERSION"; then
    say "fetching Debian's $DEB_PKG=$DEB_VERSION source package"
    APT=$SRCDIR/apt
    mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial"
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    if [[ -z "$uri" ]]; then
        uri=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list)
    fi
    printf 'deb-src %s unstable main\n' "$uri" >"$APT/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache")
    apt-get "${apt_opts[@]}" update -q
    (cd "$SRCDIR" && apt-get "${apt_opts[@]}" source --download-only "$DEB_PKG=$DEB_VERSION")
    mark "$SRCDIR/stamps/source-$DEB_VERSION"
fi
if ! done_step "$SRCDIR/stamps/extract-$UPSTREAM"; then
    say "extracting the upstream tarball"
    rm -rf "$SRC"
    tar -C "$SRCDIR" -xf "$SRCDIR/${DEB_PKG}_$UPSTREAM.orig.tar.xz"
    # Debian's orig tarball holds CPython's release tree as Python-X.Y.Z/.
    [[ -d "$SRC" ]] || { say "no $SRC after extraction"; exit 1; }
    mark "$SRCDIR/stamps/extract-$UPSTREAM"
fi

# torch's wheel and what it pulls (the CUDA build and NVIDIA's libraries: ~4 GB) are downloaded
# while CPython builds, by any pip on this machine, for the interpreter about to be built; the
# rest (small) pip fetches itself at the install.
WHEELS=$HERE/wheels
download_wheels() {
    local tags=() abis=() t
    for t in $(seq 17 39); do tags+=(--platform "manylinux_2_${t}_x86_64"); done
    if [[ -n "$FREE" ]]; then abis=(--abi "cp${MINOR/./}t"); else abis=(--abi "cp${MINOR/./}" --abi abi3); fi
    python3 -m pip download --quiet --progress-bar off -d "$WHEELS" --only-binary=:all: \
        --python-version "$MINOR" --implementation cp "${abis[@]}" --abi none \
        "${tags[@]}" --platform manylinux2014_x86_64 --platform any \
        "torch==$TORCH_VERSION" >"$HERE/download.log" 2>&1
}
DOWNLOAD=
if ! done_step "$STAMPS/wheels" && python3 -m pip --version >/dev/null 2>&1; then
    say "downloading torch $TORCH_VERSION's wheels in the background (log: $HERE/download.log)"
    mkdir -p "$WHEELS"
    (download_wheels && mark "$STAMPS/wheels" || say "wheel download failed; pip will fetch them itself") &
    DOWNLOAD=$!
fi

# 2. The build: CPython's plain release build (no PGO/LTO: those triple the time), out of the
#    source tree (both builds of a version share it), the GIL disabled for a TAG ending in t.
#    CPython's own test-support extensions (~60 C files: _testcapi and friends) are not needed to
#    run torch or memprobe: listed as disabled in the build's Modules/Setup.local, they are not
#    compiled.
CONFIGURE=(--prefix="$PREFIX" --with-ensurepip=no ${FREE:+--disable-gil})
mkdir -p "$BUILD/Modules"
cat >"$HERE/Setup.local" <<'SETUP'
*disabled*
_testbuffer
_testinternalcapi
_testcapi
_testlimitedcapi
_testclinic
_testclinic_limited
_testimportmultiple
_testmultiphase
_testsinglephase
_testexternalinspection
_ctypes_test
xxsubtype
xxlimited
xxlimited_35
SETUP
cmp -s "$HERE/Setup.local" "$BUILD/Modules/Setup.local" || cp "$HERE/Setup.local" "$BUILD/Modules/Setup.local"
if ! done_step "$STAMPS/configure"; then
    say "configure ${CONFIGURE[*]} (nice $NICE)"
    (cd "$BUILD" && nice -n "$NICE" "$SRC/configure" --quiet "${CONFIGURE[@]}" >"$HERE/configure.log" 2>&1)
    mark "$STAMPS/configure"
fi
if ! done_step "$STAMPS/build"; then
    say "make -j$JOBS (nice $NICE; an interrupted make goes on where it stopped; log: $HERE/make.log)"
    (cd "$BUILD" && nice -n "$NICE" make -j"$JOBS" >>"$HERE/make.log" 2>&1)
    mark "$STAMPS/build"
fi
if ! done_step "$STAMPS/install"; then
    say "make altinstall into $PREFIX"
    (cd "$BUILD" && nice -n "$NICE" make altinstall >"$HERE/install.log" 2>&1)
    mark "$STAMPS/install"
fi
# The build leaves out, with only a line in make.log, an extension whose library headers are
# missing (ssl: pip; ctypes, lzma, bz2, zlib: torch, numpy, pandas): checked here, and the GIL.
FREE=$FREE "$PY" - <<'PYEOF'
import os, sys, sysconfig
import bz2, ctypes, lzma, ssl, zlib  # noqa: F401
free = bool(os.environ["FREE"])
assert bool(sysconfig.get_config_var("Py_GIL_DISABLED")) == free, "GIL build setting differs from the tag"
assert (not getattr(sys, "_is_gil_enabled", lambda: True)()) == free
PYEOF

# 3. The venv and the packages: torch at its version, then memprobe editable from this checkout
#    and the extras `make install-test` installs (tools/suite_packages.py: pyproject.toml's
#    lists; on a free-threaded interpreter less the packages with no wheel for it, each named
#    with why; `make test-python` runs it again, so a venv made before an extra was added gets
#    it). --prefer-binary (there and here): a package's newest release without a wheel for this
#    interpreter (numpy's, for cp313t) would otherwise be compiled from its sdist (seen: 10+
#    minutes of C++) instead of taking the previous release's wheel.
if ! done_step "$STAMPS/venv"; then
    say "venv at $VENV"
    "$PY" -m venv --clear "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    mark "$STAMPS/venv"
fi
[[ -n "$DOWNLOAD" ]] && wait "$DOWNLOAD"
if ! done_step "$STAMPS/packages"; then
    say "pip install torch==$TORCH_VERSION, then memprobe and its test extras (log: $HERE/pip.log)"
    { nice -n "$NICE" "$VENV/bin/python" -m pip install --quiet --progress-bar off --prefer-binary \
          --find-links "$WHEELS" "torch==$TORCH_VERSION" \
      && nice -n "$NICE" "$VENV/bin/python" "$REPO/tools/suite_packages.py" --find-links "$WHEELS"; } \
        >"$HERE/pip.log" 2>&1 || { say "pip failed: see $HERE/pip.log"; exit 1; }
    mark "$STAMPS/packages"
fi

FREE=$FREE "$VENV/bin/python" - <<'PYEOF'
import importlib, os, sys
mods = ["torch", "numpy", "pyarrow", "pandas", "PIL", "psutil", "torchdata", "pytest", "memprobe"]
versions = {m: getattr(importlib.import_module(m), "__version__", "?") for m in mods}
gil = getattr(sys, "_is_gil_enabled", lambda: True)()
print(sys.version.split()[0], "GIL enabled" if gil else "GIL disabled",
      " ".join(f"{m}={v}" for m, v in versions.items()))
assert gil != bool(os.environ["FREE"]), "an import turned the GIL back on"
PYEOF
say "done: $VENV/bin/python"
if [[ -n "$RUN_TESTS" ]]; then
    make -C "$REPO" --no-print-directory test-python PYTHON="$VENV/bin/python"
else
    say "the suite: make test-python PYTHON=$VENV/bin/python"
fi
