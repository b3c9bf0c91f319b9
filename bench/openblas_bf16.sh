#!/usr/bin/env bash
# openblas_bf16.sh - builds the bf16 bench's baseline: an OpenBLAS with
# cblas_sbgemm (BUILD_BFLOAT16=1), which Debian's OpenBLAS (0.3.21 bookworm,
# 0.3.29 trixie) is built without.  Used only by bench/bf16_gemm.py, which
# dlopens it beside the system OpenBLAS; nothing in einc links it.
#
#   bench/openblas_bf16.sh [--cached] [--target T]
#
# Prints the path of the built libopenblas.so.0 on its last stdout line
# (progress goes to stderr).  --cached prints the path only when the build
# is already cached and exits 3 otherwise (it never downloads).  --target
# overrides the OpenBLAS TARGET chosen from /proc/cpuinfo: COOPERLAKE with
# avx512_bf16 (sbgemm then runs its AVX512-BF16 vdpbf16ps kernels), else
# SKYLAKEX with avx512f, else HASWELL with avx2; on the last two 0.3.21 has
# no sbgemm kernel and builds the generic C one (kernel/Makefile.L3,
# generic/gemmkernel_2x2.c), which the bench's table then says.
#
# Source: Debian's orig tarball of 0.3.21+ds (what the system library is
# built from; "+ds" drops lapack-netlib), its sha256 checked against both the
# value pinned here and the one in the package's .dsc.  The build is
# baseline-only and short (about a minute with -j2 on 2 Zen 4 cores): no
# Fortran, no LAPACK, CBLAS only, single precision and bfloat16 only, the
# pthread server as Debian's libopenblas0-pthread.  It lands in
# ${XDG_CACHE_HOME:-~/.cache}/einc-bench/openblas-bf16-0.3.21-TARGET (lib/,
# build-info) and is reused when present; delete that folder to rebuild.
set -euo pipefail

VERSION=0.3.21
DEBIAN_POOL=http://deb.debian.org/debian/pool/main/o/openblas
TARBALL=openblas_${VERSION}+ds.orig.tar.xz
DSC=openblas_${VERSION}+ds-4.dsc
SHA256=bbec5cca61c8033b2d57aaecde205d709323a0b35a5f193290081dbb3826848a

die() { echo "openblas_bf16.sh: error: $*" >&2; exit 1; }

cached_only=0
target=""
while [ $# -gt 0 ]; do
    case "$1" in
    --cached) cached_only=1 ;;
    --target) [ $# -ge 2 ] || die "--target needs a value"; target=$2; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done

# The CPU's flags decide the TARGET (and so which sbgemm kernel is built).
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { case " ${flags#*:} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
if [ -z "$target" ]; then
    if has avx512_bf16; then target=COOPERLAKE
    elif has avx512f; then target=SKYLAKEX
    elif has avx2; then target=HASWELL
    else die "this CPU has no avx2: no OpenBLAS x86_64 target is chosen for it (pass --target)"
    fi
fi
case "$target" in
COOPERLAKE) kernels="AVX512-BF16 (vdpbf16ps) kernels: sbgemm_kernel_16x4_cooperlake.c and the small-matrix sbgemm_small_kernel_*_cooperlake.c" ;;
*) kernels="generic C kernel (generic/gemmkernel_2x2.c): $target has no sbgemm kernel in $VERSION" ;;
esac

dir=${XDG_CACHE_HOME:-$HOME/.cache}/einc-bench/openblas-bf16-$VERSION-$target
lib=$dir/lib/libopenblas.so.0
if [ -f "$lib" ] && [ -f "$dir/build-info" ]; then
    echo "openblas_bf16.sh: cached $target build in $dir" >&2
    echo "$lib"
    exit 0
fi
[ "$cached_only" = 1 ] && exit 3

command -v curl >/dev/null || die "curl not found (it downloads the source)"
command -v make >/dev/null || die "make not found"
mkdir -p "$(dirname "$dir")"
work=$(mktemp -d "$dir.tmp.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "openblas_bf16.sh: downloading $TARBALL from $DEBIAN_POOL" >&2
curl -sSfL --max-time 600 -o "$work/$DSC" "$DEBIAN_POOL/$DSC" || die "downloading $DSC failed"
curl -sSfL --max-time 600 -o "$work/$TARBALL" "$DEBIAN_POOL/$TARBALL" ||
    die "downloading $TARBALL failed"
got=$(sha256sum "$work/$TARBALL" | cut -d' ' -f1)
[ "$got" = "$SHA256" ] || die "$TARBALL has sha256 $got, expected $SHA256"
grep -q "^ $SHA256 [0-9]* $TARBALL\$" "$work/$DSC" ||
    die "$DSC does not list sha256 $SHA256 for $TARBALL"
tar -xJf "$work/$TARBALL" -C "$work"
src=$work/OpenBLAS-$VERSION
[ -d "$src" ] || die "$TARBALL did not unpack to OpenBLAS-$VERSION"

# NUM_THREADS=64: the thread cap is compiled in (the default is the build
# host's core count), so the cached build still serves a larger machine.
make_args=(TARGET="$target" BUILD_BFLOAT16=1 BUILD_SINGLE=1 BUILD_DOUBLE=0 BUILD_COMPLEX=0
           BUILD_COMPLEX16=0 NOFORTRAN=1 NO_LAPACK=1 NO_LAPACKE=1 ONLY_CBLAS=1 USE_OPENMP=0
           USE_THREAD=1 NUM_THREADS=64 DYNAMIC_ARCH=0)
jobs=${JOBS:-2}
echo "openblas_bf16.sh: building OpenBLAS $VERSION (make -j$jobs ${make_args[*]})" >&2
start=$(date +%s)
if ! make -C "$src" -j"$jobs" "${make_args[@]}" libs shared >"$work/build.log" 2>&1; then
    tail -n 30 "$work/build.log" >&2
    die "the OpenBLAS build failed (log above)"
fi
seconds=$(( $(date +%s) - start ))
so=$(find "$src" -maxdepth 1 -name 'libopenblas_*.so' | head -n 1)
[ -n "$so" ] || die "the build made no libopenblas_*.so"
# (Through a file: grep -q quitting early would fail the pipe under pipefail.)
nm -D --defined-only "$so" >"$work/symbols"
grep -q ' T cblas_sbgemm$' "$work/symbols" || die "$so lacks cblas_sbgemm"

# Assemble beside the cache folder, then rename it into place, so an
# interrupted build never looks cached.
out=$work/out
mkdir -p "$out/lib"
cp "$so" "$out/lib/libopenblas.so.0"
{
    echo "version=$VERSION+ds (Debian orig tarball, sha256 $SHA256)"
    echo "target=$target"
    echo "sbgemm_kernels=$kernels"
    echo "make=make -j$jobs ${make_args[*]} libs shared"
    echo "build_seconds=$seconds"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
} >"$out/build-info"
rm -rf "$dir"
mv "$out" "$dir"
echo "openblas_bf16.sh: built $target in $seconds s; sbgemm uses the $kernels" >&2
echo "$dir/lib/libopenblas.so.0"
