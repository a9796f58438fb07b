#!/usr/bin/env bash
# Make .fi/flashinfer-aot.tar.xz: the FlashInfer modules the library baselines load on the GPU,
# compiled on this machine for sm_90a (nvcc needs no GPU), for the flashinfer stage of
# run_gpu_checks.sh to install ahead of time instead of building them there (about 5 minutes):
#
#   benchmarks/carry_flashinfer_aot.sh [DIR]        (default .fi, beside carry_flashinfer.sh's site)
#
# It installs FlashInfer for this machine's Python (its import needs torch: the dev environment's
# CPU build does), makes a CUDA_HOME of links that adds cuRAND's headers where the toolkit here
# lacks them (the sampling module includes them) and cuBLASLt's (RMSNorm's), and a link stub for
# libcuda where there is no driver (the modules are linked with -lcuda; the driver resolves it on
# the GPU), then runs benchmarks/flashinfer_aot.py, which also opens each module in TVM-FFI here.
# Five modules in 9 minutes on 2 cores, 3.3 MB (2026-12-06). The libraries call then carries
# `.fi` alone: with the working tree, about 54 MB of the 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.fi}
version=${FLASHINFER_VERSION:-0.7.4}
python=${PYTHON:-python3}
cuda=${CUDA_HOME:-/usr/local/cuda}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip install --quiet --no-deps --target "$work/site" "flashinfer-python==$version" \
    "apache-tvm-ffi>=0.1.15,<0.2" einops tabulate click tqdm nvidia-ml-py ninja
mkdir -p "$work/cuda/include"
for entry in "$cuda"/*; do
    [ "$(basename "$entry")" = include ] || ln -s "$entry" "$work/cuda/"
done
ln -s "$cuda"/include/* "$work/cuda/include/"
if [ ! -f "$cuda/include/curand.h" ]; then
    "$python" -m pip download --quiet --no-deps -d "$work/curand" nvidia-curand
    (cd "$work/curand" && "$python" -m zipfile -e nvidia_curand-*.whl .)
    ln -s "$work"/curand/nvidia/cu*/include/curand*.h "$work/cuda/include/"
fi
if [ ! -f "$cuda/include/cublasLt.h" ]; then  # RMSNorm's module includes it (its types alone)
    "$python" -m pip download --quiet --no-deps -d "$work/cublas" nvidia-cublas
    "$python" - "$work/cublas" <<'EOF'
import pathlib, sys, zipfile
folder = pathlib.Path(sys.argv[1])
with zipfile.ZipFile(next(folder.glob("nvidia_cublas-*.whl"))) as wheel:
    wheel.extractall(folder, [name for name in wheel.namelist() if "/include/" in name])
EOF
    ln -s "$work"/cublas/nvidia/cu*/include/*.h "$work/cuda/include/"
fi
if ! ls "$cuda"/lib64/libcuda.so "$cuda"/lib64/stubs/libcuda.so >/dev/null 2>&1 \
        && ! ldconfig -p | grep -q 'libcuda\.so '; then
    mkdir -p "$work/stub" && : > "$work/stub/empty.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$work/stub/libcuda.so" "$work/stub/empty.c"
    export LIBRARY_PATH="$work/stub${LIBRARY_PATH:+:$LIBRARY_PATH}"
fi
export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}" PATH="$work/site/bin:$PATH"
export CUDA_HOME="$work/cuda" FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE="$work/ws"
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
# the CUDA runtime the modules need, for the check that each opens here
export LD_LIBRARY_PATH="$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$python" benchmarks/flashinfer_aot.py -o "$dest/flashinfer-aot.tar.xz"
