#!/usr/bin/env bash
# Build a free-threaded CPython (PEP 703, `--disable-gil`) and a virtualenv with torch and
# memprobe in it, from the package registries this machine reaches (Debian's source packages
# and PyPI). Not part of `make test`: it takes 10-30 minutes of CPU and ~6 GB of disk.
#
#   bash benchmarks/freethreaded/build.sh            # everything, into /work/ft
#   FT=/some/dir bash benchmarks/freethreaded/build.sh
#
# Each step leaves a stamp file in $FT/stamps; a step whose stamp exists is skipped, so the script
# can be run again after a failure and goes on where it stopped (delete a stamp to redo its step).
#
# Why these versions (checked 2026-11-26): Debian ships no free-threaded interpreter, so the
# upstream tarball inside Debian's `python3.13` source package (`*.orig.tar.xz`: CPython's own
# release, Debian's patches are not applied) is configured with --disable-gil. Only 3.13.15's
# files could be fetched here (the newer 3.13 and every 3.14 source package listed by the
# registry's index gave 404). torch publishes cp313t wheels up to 2.10 (2.13 has cp314t but
# none for cp313t); PyPI's torch for Linux is the CUDA build, which runs on the CPU here.
#
# Environment knobs: FT (prefix, default /work/ft), DEB_PKG (python3.13), DEB_VERSION
# (3.13.15-1), TORCH_VERSION (2.10.0), JOBS (2), NICE (10).
set -euo pipefail

FT=${FT:-/work/ft}
DEB_PKG=${DEB_PKG:-python3.13}
DEB_VERSION=${DEB_VERSION:-3.13.15-1}
TORCH_VERSION=${TORCH_VERSION:-2.10.0}
JOBS=${JOBS:-2}
NICE=${NICE:-10}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

UPSTREAM=${DEB_VERSION%-*}   # 3.13.15
MINOR=${UPSTREAM%.*}         # 3.13
PREFIX=$FT/python$MINOR-ft
PY=$PREFIX/bin/python${MINOR}t
VENV=$FT/venv
STAMPS=$FT/stamps
mkdir -p "$FT" "$STAMPS" "$FT/src"

say() { printf '[freethreaded %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
done_step() { [[ -e "$STAMPS/$1" ]]; }
mark() { date -u +%FT%TZ >"$STAMPS/$1"; }

# 1. The source: `apt-get source --download-only` with an apt configuration of our own (only a
#    deb-src line for Debian unstable, built from the mirror the system already uses), so the
#    system's sources are not touched.
if ! done_step source; then
    say "fetching Debian's $DEB_PKG=$DEB_VERSION source package"
    APT=$FT/apt
    mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial"
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    if [[ -z "$uri" ]]; then
        uri=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list)
    fi
    printf 'deb-src %s unstable main\n' "$uri" >"$APT/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache")
    apt-get "${apt_opts[@]}" update -q
    (cd "$FT/src" && apt-get "${apt_opts[@]}" source --download-only "$DEB_PKG=$DEB_VERSION")
    mark source
fi

SRC=$FT/src/Python-$UPSTREAM
if ! done_step extract; then
    say "extracting the upstream tarball"
    rm -rf "$SRC"
    tar -C "$FT/src" -xf "$FT/src/${DEB_PKG}_$UPSTREAM.orig.tar.xz"
    # Debian's orig tarball holds CPython's release tree as Python-X.Y.Z/.
    [[ -d "$SRC" ]] || { say "no $SRC after extraction"; exit 1; }
    mark extract
fi

# The wheels (torch's CUDA build and NVIDIA's libraries: ~4 GB) are downloaded while CPython
# builds, by any pip on this machine, for the interpreter about to be built (cp313t).
WHEELS=$FT/wheels
download_wheels() {
    local tags=() t
    for t in 2_17 2_24 2_26 2_27 2_28 2_31 2_34 2_35 2_36; do tags+=(--platform "manylinux_${t}_x86_64"); done
    python3 -m pip download --quiet --progress-bar off -d "$WHEELS" --only-binary=:all: \
        --python-version "$MINOR" --implementation cp --abi "cp${MINOR/./}t" --abi none \
        "${tags[@]}" --platform manylinux2014_x86_64 --platform any \
        "torch==$TORCH_VERSION" numpy pyarrow pillow torchdata pandas >"$FT/download.log" 2>&1
}
DOWNLOAD=
if ! done_step wheels && python3 -m pip --version >/dev/null 2>&1; then
    say "downloading the wheels in the background (log: $FT/download.log)"
    mkdir -p "$WHEELS"
    (download_wheels && mark wheels || say "wheel download failed; pip will fetch them itself") &
    DOWNLOAD=$!
fi

# 2. The build: CPython's plain release build (no PGO/LTO: those triple the time), GIL disabled.
if ! done_step configure; then
    say "configure --disable-gil (nice $NICE)"
    (cd "$SRC" && nice -n "$NICE" ./configure --quiet --disable-gil --prefix="$PREFIX" \
        --with-ensurepip=no >"$FT/configure.log" 2>&1)
    mark configure
fi
# CPython's own test-support extensions (~60 C files: _testcapi and friends) are not needed to
# run torch or memprobe: listed as disabled, they are not compiled.
cat >"$FT/Setup.local" <<'SETUP'
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
cmp -s "$FT/Setup.local" "$SRC/Modules/Setup.local" || cp "$FT/Setup.local" "$SRC/Modules/Setup.local"
if ! done_step build; then
    say "make -j$JOBS (nice $NICE; an interrupted make goes on where it stopped)"
    (cd "$SRC" && nice -n "$NICE" make -j"$JOBS" >>"$FT/make.log" 2>&1)
    mark build
fi
if ! done_step install; then
    say "make altinstall into $PREFIX"
    (cd "$SRC" && nice -n "$NICE" make altinstall >"$FT/install.log" 2>&1)
    mark install
fi
"$PY" -c 'import sys, sysconfig; assert sysconfig.get_config_var("Py_GIL_DISABLED"), "not a free-threaded build"; assert not sys._is_gil_enabled()'

# 3. The venv and the packages. torch's cp313t wheel is the CUDA build and pulls NVIDIA's CUDA
#    libraries (~3 GB); torch imports them at start even on a machine without a GPU.
if ! done_step venv; then
    say "venv at $VENV"
    "$PY" -m venv --clear "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    mark venv
fi
# --prefer-binary: numpy's newest release has no cp313t wheel, and pip would compile it from its
# sdist (seen: 10+ minutes of C++ at nice 10) instead of taking 2.4.6's wheel.
PIP=("$VENV/bin/python" -m pip install --quiet --progress-bar off --prefer-binary)
[[ -n "$DOWNLOAD" ]] && wait "$DOWNLOAD"
if ! done_step packages; then
    say "pip install torch==$TORCH_VERSION numpy pyarrow pillow psutil torchdata pytest"
    nice -n "$NICE" "${PIP[@]}" --find-links "$WHEELS" "torch==$TORCH_VERSION" numpy pyarrow pillow \
        psutil torchdata pandas plotly pyyaml jinja2 pytest pytest-xdist
    mark packages
fi
if ! done_step memprobe; then
    say "memprobe (editable) from $REPO"
    "${PIP[@]}" --no-deps -e "$REPO"
    mark memprobe
fi

"$VENV/bin/python" - <<'EOF'
import sys, importlib
mods = ["torch", "numpy", "pyarrow", "PIL", "psutil", "torchdata", "memprobe"]
versions = {m: getattr(importlib.import_module(m), "__version__", "?") for m in mods}
print(sys.version.split()[0], "GIL enabled" if sys._is_gil_enabled() else "GIL disabled",
      " ".join(f"{m}={v}" for m, v in versions.items()))
assert not sys._is_gil_enabled(), "an import turned the GIL back on"
EOF
say "done: $VENV/bin/python"
