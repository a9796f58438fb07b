#!/usr/bin/env bash
# Download, into .fi/, FlashInfer and what its import needs, for an H200 machine without a
# package registry (Python 3.12), slimmed to fit one call's carry beside .whl/:
#
#   benchmarks/carry_flashinfer.sh [DIR]        (default .fi; git-ignore it: echo /.fi/ >> .git/info/exclude)
#
# flashinfer-python's wheel is about 100 MB, over the 64 MB a call may carry. Most of it is the
# CUDA sources of modules the library baselines never build (MoE, FP4/FP8 GEMMs, Blackwell
# attention, experimental kernels). The slim wheel keeps every Python file, every data file,
# the headers (include/, CUTLASS, CCCL) and the top-level csrc/ the norm, RoPE, sampling, decode
# and prefill modules compile from; it drops the .cu/.cuh/.h sources under csrc/'s subfolders,
# the other packages' csrc/ and kernel_src/, and experimental/. About 38 MB.
#
# On that machine: benchmarks/run_gpu_checks.sh OUT flashinfer installs it, JIT-builds the
# modules the library baselines call (benchmarks/flashinfer_setup.py) and installs them as
# ahead-of-time artifacts, so sandboxed workers load them without building.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.fi}
version=${FLASHINFER_VERSION:-0.7.4}
mkdir -p "$dest"
download() {
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$1" "${@:2}"
}
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
download "$raw" "flashinfer-python==$version"
# Its import needs these (the image has torch, numpy, packaging, requests, cuda-bindings).
for wheel in "apache-tvm-ffi>=0.1.15,<0.2" einops tabulate click tqdm nvidia-ml-py ninja; do
    download "$dest" "$wheel"
done
python3 - "$raw"/flashinfer_python-*.whl "$dest" <<'EOF'
"""Repack the wheel without the CUDA sources of modules the baselines never build; the RECORD
is written again for the files kept."""
import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

SOURCES = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".inc", ".inl", ".jinja", ".cubin", ".ptx")


def dropped(name: str) -> bool:
    if not name.endswith(SOURCES):
        return False
    return bool(re.match(r"flashinfer/data/csrc/[^/]+/", name)
                or ("/csrc/" in name and not name.startswith("flashinfer/data/csrc/"))
                or "/kernel_src/" in name or name.startswith("flashinfer/experimental/"))


source, dest = Path(sys.argv[1]), Path(sys.argv[2])
target = dest / source.name
with zipfile.ZipFile(source) as wheel, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as slim:
    record_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/RECORD"))
    rows = []
    for info in wheel.infolist():
        if info.filename == record_name or dropped(info.filename):
            continue
        data = wheel.read(info)
        slim.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{info.filename},sha256={digest},{len(data)}")
    rows.append(f"{record_name},,")
    slim.writestr(record_name, "\n".join(rows) + "\n")
print(f"{target}: {target.stat().st_size / 1e6:.1f} MB (from {source.stat().st_size / 1e6:.1f})")
EOF
ls -la "$dest"
du -sh "$dest"
