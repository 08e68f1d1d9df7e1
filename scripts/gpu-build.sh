#!/usr/bin/env bash
# gpu-build.sh: builds cinfer with the CUDA backend on the GPU machine, which has CUDA, cmake, ninja and
# gcc but none of our Debian libraries and no package registry.
#   Here (no nvidia-smi): apt-get download the libraries' .deb files into .gpu/debs (git-ignored; the
#   device `run` call carries it: carry [".gpu"]).
#   There (nvidia-smi present): unpack them into .gpu/prefix, point the .pc files at it, link every library
#   the system already has to the system's copy (so LD_LIBRARY_PATH shadows nothing), write .gpu/env.sh,
#   and build into build-gpu with -DCINFER_CUDA=ON (everything, or the targets named as arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
debs=$root/.gpu/debs
# the libraries of scripts/setup.sh and what they load at run time (not libc and friends), plus pkgconf
PKGS="libcjson1 libcjson-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libpcre2-dev
libutf8proc2 libutf8proc-dev libmicrohttpd12 libmicrohttpd-dev libgnutls30 libnettle8 libhogweed6 libgmp10
libp11-kit0 libtasn1-6 libidn2-0 libunistring2 libffi8 pkgconf pkgconf-bin libpkgconf3"

if ! command -v nvidia-smi >/dev/null 2>&1; then
  mkdir -p "$debs"
  missing=""
  for p in $PKGS; do ls "$debs/${p}_"*.deb >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    [ -d /var/lib/apt/lists ] && ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1 || apt-get update -qq
    (cd "$debs" && apt-get download $missing)
  fi
  echo "gpu-build: $(ls "$debs" | wc -l) packages in .gpu/debs ($(du -sh "$debs" | cut -f1)); run this script on the GPU machine with carry [\".gpu\"]"
  exit 0
fi

prefix=$root/.gpu/prefix
rm -rf "$prefix"
mkdir -p "$prefix"
for f in "$debs"/*.deb; do
  if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$f" "$prefix"; else ar p "$f" data.tar.xz | tar -xJ -C "$prefix"; fi
done
libdir=$prefix/usr/lib/x86_64-linux-gnu
for pc in "$libdir"/pkgconfig/*.pc "$prefix"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] || continue
  sed -i -E "s#^(prefix|exec_prefix|libdir|includedir|sharedlibdir)=/usr#\1=$prefix/usr#; /^Requires.private/d" "$pc"
done
for so in "$libdir"/*.so.[0-9]*; do
  name=$(basename "$so")
  case "$name" in *.so.[0-9]) ;; *.so.[0-9][0-9]) ;; *) continue ;; esac   # sonames only
  sys=$(PATH=$PATH:/sbin ldconfig -p | awk -v n="$name" '$1 == n && /x86-64/ {print $NF; exit}')
  [ -n "$sys" ] && ln -sf "$sys" "$so"
done
cat > "$root/.gpu/env.sh" <<ENV
export PKG_CONFIG_PATH=$libdir/pkgconfig:$prefix/usr/share/pkgconfig
export CMAKE_PREFIX_PATH=$prefix/usr
export LD_LIBRARY_PATH=$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export PATH=\$PATH:$prefix/usr/bin
export NCCL_NVLS_ENABLE=0
ENV
. "$root/.gpu/env.sh"
pkgconfig_exe=$(command -v pkg-config || true)
[ -n "$pkgconfig_exe" ] || pkgconfig_exe=$prefix/usr/bin/pkgconf
echo "gpu-build: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader); nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'); pkg-config $pkgconfig_exe"
# warnings are CI's business (here another gcc may warn differently): no -Werror on the GPU machine
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCINFER_CUDA=ON -DCINFER_WERROR=OFF -DPKG_CONFIG_EXECUTABLE="$pkgconfig_exe" >/dev/null
# -k 0: one broken target elsewhere in the tree does not stop the others (the exit status still reports it).
# Arguments, if any, name the only targets to build.
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build-gpu -j "$(nproc)" "${targets[@]}" -- -k 0
