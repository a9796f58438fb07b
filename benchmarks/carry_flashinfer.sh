#!/usr/bin/env bash
# Make .fi/flashinfer-site.tar.xz: FlashInfer and what its import needs, installed for the
# H200 machine's Python 3.12 (which has no package registry) and packed small enough to carry:
#
#   benchmarks/carry_flashinfer.sh [DIR]        (default .fi; git-ignore it: echo /.fi/ >> .git/info/exclude)
#
# A call carries 64 MiB in all, the working tree included (about 27 MB of tracked files), and
# flashinfer-python's wheel alone is about 100 MB. Most of it is the CUDA sources of modules the
# library baselines never build (MoE, FP4/FP8 GEMMs, Blackwell attention, experimental
# kernels): the wheel is slimmed first (every Python and data file kept, the headers of
# include/, CUTLASS and CCCL kept, and the top-level csrc/ the norm, RoPE, sampling, decode and
# prefill modules compile from; the .cu/.cuh/.h sources under csrc/'s subfolders, the other
# packages' csrc/ and kernel_src/, and experimental/ dropped), installed with its small
# dependencies into one folder, and packed with xz: about 20 MB, so `.fi` travels alone or beside
# `.whl/` (18 MB). Carry `.fi` to the `flashinfer` and `libraries` stages; they need nothing of
# `.whl/`.
#
# On that machine: benchmarks/run_gpu_checks.sh OUT flashinfer unpacks it into FI_SITE (default
# /tmp/fi_site), JIT-builds the modules the library baselines call
# (benchmarks/flashinfer_setup.py) and installs them ahead of time, so sandboxed workers load
# them without building.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.fi}
version=${FLASHINFER_VERSION:-0.7.4}
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
target=(--only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/raw" "$work/wheels" "$work/site" "$dest"
python3 -m pip download --quiet --no-deps "${target[@]}" -d "$work/raw" "flashinfer-python==$version"
# Its import needs these (the image has torch, numpy, packaging, requests, cuda-bindings);
# ninja's wheel brings the executable FlashInfer's JIT runs.
for wheel in "apache-tvm-ffi>=0.1.15,<0.2" einops tabulate click tqdm nvidia-ml-py ninja; do
    python3 -m pip download --quiet --no-deps "${target[@]}" -d "$work/wheels" "$wheel"
done
python3 - "$work"/raw/flashinfer_python-*.whl "$work/wheels" <<'EOF'
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
print(f"{target.name}: {target.stat().st_size / 1e6:.1f} MB (from {source.stat().st_size / 1e6:.1f})")
EOF
python3 -m pip install --quiet --no-deps --no-compile "${target[@]}" --target "$work/site" \
    "$work"/wheels/*.whl
XZ_OPT="-9 -T0" tar -C "$work/site" -cJf "$dest/flashinfer-site.tar.xz" .
ls -la "$dest"
