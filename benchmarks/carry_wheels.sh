#!/usr/bin/env bash
# Download, into .whl/, the wheels the GPU checks need on an H200 machine without a package
# registry (its image has torch, Triton, numpy, cuda-bindings; not these), for its Python 3.12:
#
#   benchmarks/carry_wheels.sh [DIR]        (default .whl; git-ignore it: echo /.whl/ >> .git/info/exclude)
#
# On that machine, before benchmarks/run_gpu_checks.sh:
#   python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site
# SQLAlchemy and greenlet: the stores; Optuna, Alembic, colorlog and Mako: the template search;
# nvmath-python: the cuBLASLt baselines (cuda-core and cuda-pathfinder ride along in case the
# image's are older than it needs). About 18 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.whl}
mkdir -p "$dest"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
for wheel in sqlalchemy greenlet optuna alembic colorlog mako nvmath-python==1.0.0 \
             cuda-core==1.2.2 cuda-pathfinder==1.9.1; do
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${platforms[@]}" -d "$dest" "$wheel"
done
ls -la "$dest"
