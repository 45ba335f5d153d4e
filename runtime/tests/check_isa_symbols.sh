#!/bin/sh
# The AVX-512 kernels' object may define no symbol another object could
# resolve to except its own entry points (backends/cpu/IsaKernelsAvx512.cpp says
# why): given the runtime's objects, fails naming any other global or weak
# symbol the AVX-512 object defines.
set -eu
obj=""
for f in "$@"; do
  case "$f" in *IsaKernelsAvx512.cpp.o) obj="$f" ;; esac
done
[ -n "$obj" ] || { echo "no IsaKernelsAvx512.cpp.o among the objects"; exit 1; }
bad=$(nm "$obj" | awk '$2 ~ /^[TWVDBRuiG]$/ && $3 !~ /^_ZN4ztrt6avx512/ {print $3}')
if [ -n "$bad" ]; then
  echo "$obj defines symbols other objects could bind to:"
  echo "$bad" | c++filt
  exit 1
fi
echo "$obj: only ztrt::avx512 entry points are global"
