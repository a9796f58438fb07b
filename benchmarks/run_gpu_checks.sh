#!/usr/bin/env bash
# Run everything that exists for the GPU, on a machine with a CUDA GPU, and write the results to
# OUTDIR: the `gpu`-marked tests, a calibrated hardware profile, and the GPU benchmarks.
#
#   benchmarks/run_gpu_checks.sh OUTDIR [STAGE ...]
#
#   stages: env tests calibrate harness   (the default, in this order; tests: the `gpu`-marked
#                        tests, until the call's deadline, each outcome appended to
#                        OUTDIR/TAG-gpu-tests.jsonl as it comes; a later call goes on from
#                        that ledger's copy at GPU_TESTS_LEDGER, default the committed
#                        benchmarks/results/TAG-gpu-tests.jsonl, running only what it lacks for
#                        the same code: tests/ledger.py)
#           throughput   issue 13: seconds per optimizer candidate, phases before/after, the
#                        suite cold/warm (benchmarks/throughput_gpu.py, resumable; the search
#                        with THROUGHPUT_PER_GPU units on the GPU, default 6, and
#                        THROUGHPUT_CANDIDATES candidates, default 60)
#           sharing      issue 13 with units sharing the GPU: for each N of SHARE_PER_GPU
#                        (default "1 3"), the throughput stage's optimizer search over its four
#                        problems (SHARE_CANDIDATES candidates, default 24) with N units on the
#                        GPU, their timed loops one at a time (throughput_gpu.py --per-gpu N
#                        --name TAG-shareN, into OUTDIR/sharing/, TAG the GPU's model: h200,
#                        h100; goes on from the committed benchmarks/results/TAG-shareN-
#                        throughput-state); then whether the times agree: six problems'
#                        shipped solutions benched alone and 3 to a GPU
#                        (benchmarks/sharing_fidelity.py, OUTDIR/sharing/
#                        TAG-sharing-fidelity.json; resumable from OUTDIR/sharing)
#           suite        the bundled suite and its shipped solutions (issue 5; goes on from
#                        the committed benchmarks/results/TAG-suite.db.gz, or SUITE_STORE,
#                        and leaves OUTDIR/suite/TAG-suite.db.gz to commit)
#                        (SUITE_PER_GPU=N, here and in suitewarm: N units share the GPU, see
#                        sharing; each call's N is in the calls ledger)
#           suitewarm    issue 13's suite_warm_minutes measured, not extrapolated: the whole
#                        suite benched into a results store of its own with the committed
#                        baselines imported (suite_gpu.py --name TAG-warm: only the shipped
#                        solutions are timed, and any baseline the committed file lacks); the
#                        bench seconds of each call are summed in OUTDIR/suitewarm/
#                        TAG-warm-suite-time.json; goes on from the committed
#                        TAG-warm-suite.db.gz (or WARM_STORE) and TAG-warm-suite-calls.jsonl
#           forge        template search over the 47 L1/L2 problems a template solves and its
#                        goal (issue 6; goes on from the committed TAG-forge.db.gz,
#                        TAG-forge.jsonl and TAG-forge-cuts.jsonl, or FORGE_STORE, and leaves
#                        OUTDIR/forge/TAG-forge.db.gz to commit; FORGE_COMPOSE=1 adds a
#                        per-shape composite to the problems already finished instead of
#                        searching: forge_gpu.py --compose, and FORGE_SEEDS=1 with it judges
#                        the templates' seeds the archive lacks first (--seeds);
#                        FORGE_PROBLEMS="tier/name ..." limits either to those problems;
#                        FORGE_AGAIN="TEXT ..." searches again the finished problems whose
#                        address has a TEXT, after their template changed: one call only;
#                        FORGE_PER_GPU=N judges N candidates side by side, see sharing)
#           hgemm        the HGEMM tuner and benchmark (issue 7; carry nvmath-python)
#           sandbox      the sandbox's cost per candidate on the GPU (benchmarks/sandbox_cost.py)
#           floor        the launch floor: near-empty kernels, cold and warm L2
#           variants     kernel variants against the shipped solutions, eager and torch.compile
#                        on each problem's largest workload (benchmarks/variants_gpu.py, its
#                        default problems; about a minute); VARIANTS_ARGS replaces its
#                        arguments (default "--largest 1"), e.g. "--largest 2 --smallest 2
#                        l2/swiglu_mlp_llama3_1_8b=swiglu_mlp"
#           timer        where the timer's share of a timed loop goes, per call: flush and
#                        synchronizations, a clock sample, a profiler session, whole loops
#                        (benchmarks/timer_cost.py, about 20 s; OUTDIR/timer-cost.json)
#           compare      what one output comparison costs the driver alone on the GPU, per
#                        workload of the throughput search's problems, and its kernels
#                        (benchmarks/compare_cost.py, about 30 s; OUTDIR/compare-cost.json)
#           guards       what the worker's guard check costs per timed call, part by part, alone
#                        on the GPU (benchmarks/guard_cost.py, about 10 s; OUTDIR/guard-cost.json)
#           gap          whether a kernel-only time carries the GPU's idle gap before the launch
#                        (benchmarks/hgemm_gap_probe.py; issue 15's benchmark bias, about 20 s)
#           launch       host microseconds per HGEMM launch: solforge's Python, Triton's dispatch
#                        and the driver, torch.matmul beside them (benchmarks/hgemm_launch_host.py,
#                        about 30 s)
#           examples     the public example solutions in $EXAMPLES (folders, space-separated:
#                        SOL-ExecBench's examples/ and FlashInfer-Bench's examples/), built
#                        and judged (benchmarks/examples_gpu.py; goes on from the committed
#                        benchmarks/results/TAG-examples.json; EXAMPLES_AGAIN="TEXT ..."
#                        judges again the examples whose key contains a TEXT)
#           libraries    the library baselines (cuDNN SDPA, cuBLASLt, FlashInfer) of the
#                        problems that map to one (benchmarks/library_baselines_gpu.py; goes
#                        on from the committed benchmarks/results/TAG-library-baselines.json;
#                        LIBRARIES_AGAIN="TEXT ..." judges again the recorded problems whose
#                        address contains a TEXT; a problem still running after
#                        LIBRARY_LIMIT_S seconds, default 300, is stopped and recorded as
#                        failed; LIBRARY_PROBLEMS="ADDRESS ..." judges those alone, in that
#                        order)
#           flashinfer   FlashInfer for the libraries stage: unpacks FI_CARRY/flashinfer-site.tar.xz
#                        (FI_CARRY default .fi, made beforehand by benchmarks/carry_flashinfer.sh
#                        and carried) into FI_SITE (default /tmp/fi_site), installs the modules
#                        of FI_CARRY/flashinfer-aot.tar.xz ahead of time if it is there (compiled
#                        on the CPU machine by benchmarks/carry_flashinfer_aot.sh for the same
#                        FlashInfer), then builds the modules its library baselines call that
#                        are still missing and installs them ahead of time, so sandboxed
#                        workers load them (benchmarks/flashinfer_setup.py, about 40-60 s a
#                        module, minutes for a prefill one; resumable: goes on from
#                        OUTDIR/flashinfer-setup.json). Later stages and calls on the machine
#                        find FlashInfer in FI_SITE; the libraries stage leaves a FlashInfer
#                        baseline whose module is not built yet for a later call.
#           phases       one evaluation's phase table, cold (without the torch.compile baseline
#                        compiled ahead, then with it) and warm (benchmarks/eval_phases.py)
#           ipc          CUDA IPC between uids (benchmarks/cuda_ipc_probe.py; run as root)
#
# Files and stores are named by the GPU's model (TAG: h200, h100; nvidia-smi's name, h200 where
# it cannot say). throughput, suite, suitewarm, forge, hgemm, examples and libraries go on from
# and write the H200's (h200-*): on another GPU they are skipped, unless ANY_GPU=1 (a call that
# names no machine kind can get an H100), and then each goes on from and writes that GPU's own
# (h100-*: never the H200's store with another GPU's times in it); hgemm, whose table is the
# H200's, and a suite without that GPU's launch floor (the floor stage first) stay skipped.
# HARNESS_PARTS (default: all) picks the parts of benchmarks/harness_gpu.py the harness stage runs.
#
# A stage whose result file is already in OUTDIR is skipped, so a run cut short by a time limit
# resumes where it stopped. DEADLINE_S (default 540) is the whole call's: each stage that takes
# a deadline gets what the stages before it left, and a stage left less than MIN_STAGE_S
# (default 30) is not started (the next call runs it). suite, forge, hgemm, examples, libraries
# and flashinfer are long: they work until their deadline and the next call of the same stage
# goes on from its store. The stages
# that time baselines (suite, forge, examples, libraries) start from the committed
# benchmarks/results/TAG-baselines.json and export the store to OUTDIR/TAG-baselines.json when
# they end (throughput keeps its own store and export).
# Works from a source checkout without installing: src/ goes on PYTHONPATH.
set -uo pipefail
out=${1:?usage: benchmarks/run_gpu_checks.sh OUTDIR [STAGE ...]}
shift
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(env tests calibrate harness)
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
python=${PYTHON:-python3}

gpu_tag() {  # h200, h100: the GPU's model, naming the files (h200 if unknown)
    local model
    model=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 \
        | grep -o 'H[0-9][0-9][0-9]' | head -n 1)
    echo "${model:-H200}" | tr 'H' 'h'
}

tag=$(gpu_tag)
call_deadline=${DEADLINE_S:-540}
min_stage=${MIN_STAGE_S:-30}

run_stage() {  # name, result file ("" for a stage that resumes by itself), command...
    local name=$1 result=$2
    shift 2
    if [ -n "$result" ] && [ -s "$out/$result" ]; then
        echo "== $name: $out/$result exists, skipped"
        return 0
    fi
    deadline=$((call_deadline - SECONDS))  # what this call's earlier stages left
    if [ "$deadline" -lt "$min_stage" ]; then
        echo "== $name: ${deadline} s of DEADLINE_S=$call_deadline left, not started (the next call runs it)"
        return 0
    fi
    echo "== $name"
    local start=$SECONDS
    "$@"
    local status=$?
    echo "== $name: exit $status after $((SECONDS - start)) s"
    return 0
}

stage_env() {
    {
        date -u +"%Y-%m-%dT%H:%M:%SZ"
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
            --format=csv
        "$python" -c "import torch, triton, platform; print('python', platform.python_version());
print('torch', torch.__version__, 'cuda', torch.version.cuda); print('triton', triton.__version__);
print('device', torch.cuda.get_device_name(0))"
        command -v ncu && ncu --version | tail -1
        command -v nvcc && nvcc --version | tail -1
    } > "$out/environment.txt" 2>&1
}

stage_tests() {  # goes on from the ledger of the same code (tests/ledger.py), see the usage
    local ledger=$out/$tag-gpu-tests.jsonl from=${GPU_TESTS_LEDGER:-benchmarks/results/$tag-gpu-tests.jsonl}
    [ -s "$ledger" ] || [ ! -s "$from" ] || cp "$from" "$ledger"
    # stopped (SIGINT: pytest still reports what ran) 15 s before the call's deadline; a hang
    # prints every thread's stack after 300 s
    SOLFORGE_TESTS_LEDGER=$ledger timeout -s INT "$((deadline > 45 ? deadline - 15 : 30))" \
        "$python" -m pytest -m gpu -q -rA -p no:cacheprovider -o faulthandler_timeout=300 \
        2>&1 | tee -a "$out/gpu-tests.log"
    "$python" tests/ledger.py "$ledger" | tee -a "$out/gpu-tests.log"
}

stage_calibrate() {
    "$python" -m solforge calibrate -o "$out/$tag-measured.json" 2>&1 | tee "$out/calibrate.log"
}

stage_harness() {
    # shellcheck disable=SC2086
    "$python" benchmarks/harness_gpu.py "$out" ${HARNESS_PARTS:-} 2>&1 | tee -a "$out/harness.log"
}

import_baselines() {  # [--cache-dir DIR]: this GPU's committed baselines, so a fresh machine starts warm
    local file=benchmarks/results/$tag-baselines.json
    [ -f "$file" ] || return 0
    "$python" -m solforge baselines import "$file" "$@" || echo "(baselines not imported)"
}

export_baselines() {  # what the default store holds now (the committed ones and those measured
    # here) to OUTDIR/TAG-baselines.json: commit it, and the next machine starts warmer
    "$python" -m solforge baselines export "$out/$tag-baselines.json" \
        || echo "(baselines not exported)"
}

stage_throughput() {
    # Goes on from the committed state (the stages and problems measured in earlier sessions).
    local state="$out/throughput/$tag-throughput-state"
    if [ ! -d "$state" ] && [ -d "benchmarks/results/$tag-throughput-state" ]; then
        mkdir -p "$out/throughput" && cp -r "benchmarks/results/$tag-throughput-state" "$state"
    fi
    import_baselines --cache-dir "$state/cache"
    # Six units on the GPU, racing on: on an H100 (2026-12-06) 2.47 s a candidate against 3.76
    # with three and 2.61 with six and no racing (benchmarks/results/h100-2026-12-06/)
    "$python" benchmarks/throughput_gpu.py "$out/throughput" --name "$tag" --deadline-s "$deadline" \
        --per-gpu "${THROUGHPUT_PER_GPU:-6}" --candidates "${THROUGHPUT_CANDIDATES:-60}" \
        2>&1 | tee -a "$out/throughput.log"
}

on_an_h200() {  # STAGE: whether the stage runs on this GPU (an H200, or any with ANY_GPU=1)
    [ "$tag" = h200 ] || [ "${ANY_GPU:-0}" = 1 ] && return 0
    echo "== $1: skipped on this $tag: it goes on from and writes the H200's stores and files" \
         "(h200-*); ANY_GPU=1 runs it on this GPU's own ($tag-*)"
    return 1
}

only_h200() {  # STAGE: a stage whose files are the H200's whatever ANY_GPU says (hgemm's table)
    [ "$tag" = h200 ] && return 0
    echo "== $1: skipped on this $tag: its files are the H200's (h200-hgemm-*, the shipped table)"
    return 1
}

stage_sharing() {
    local per name state
    for per in ${SHARE_PER_GPU:-1 3}; do
        name="$tag-share$per"
        state="$out/sharing/$name-throughput-state"
        if [ ! -d "$state" ] && [ -d "benchmarks/results/$name-throughput-state" ]; then
            mkdir -p "$out/sharing" && cp -r "benchmarks/results/$name-throughput-state" "$state"
        fi
        import_baselines --cache-dir "$state/cache"
        "$python" benchmarks/throughput_gpu.py "$out/sharing" --name "$name" --per-gpu "$per" \
            --candidates "${SHARE_CANDIDATES:-24}" --before 0 --suite-sample 0 \
            --deadline-s "$((call_deadline - SECONDS))" 2>&1 | tee -a "$out/sharing.log"
    done
    import_baselines
    "$python" benchmarks/sharing_fidelity.py "$out/sharing" --name "$tag" --per-gpu 3 \
        --deadline-s "$((call_deadline - SECONDS))" 2>&1 | tee -a "$out/sharing.log"
}

suite_store=${SUITE_STORE:-benchmarks/results/$tag-suite.db.gz}
forge_store=${FORGE_STORE:-benchmarks/results/$tag-forge.db.gz}
warm_store=${WARM_STORE:-benchmarks/results/$tag-warm-suite.db.gz}

floor_args=()  # the suite's launch floor: the H200's recorded one, else this GPU's own
launch_floor() {  # STAGE: sets floor_args; fails (saying so) on a GPU with none measured
    floor_args=()
    [ "$tag" = h200 ] && return 0
    local found
    for found in "$out/launch-floor.json" "benchmarks/results/$tag-launch-floor.json"; do
        if [ -s "$found" ]; then floor_args=(--launch-floor "$found"); return 0; fi
    done
    echo "== $1: no launch floor of this $tag: run the floor stage first (same OUTDIR)"
    return 1
}

unpack_store() {  # COMMITTED.db.gz DIR/STORE.db: earlier machines' store, unless one is there
    mkdir -p "$(dirname "$2")"
    if [ ! -s "$2" ] && [ -s "$1" ]; then gunzip -c "$1" > "$2"; fi
}

pack_store() {  # DIR/STORE.db DIR/NAME.db.gz: the store to commit in place of the old one
    if [ -s "$1" ]; then gzip -c "$1" > "$2"; fi
}

stage_suite() {
    # Goes on from the committed store of earlier machines' calls (suite.db, gzipped) and
    # leaves OUTDIR/suite/TAG-suite.db.gz to commit in its place: the suite ends over calls.
    launch_floor suite || return 0
    unpack_store "$suite_store" "$out/suite/suite.db"
    import_baselines
    "$python" benchmarks/suite_gpu.py "$out/suite" all --name "$tag" "${floor_args[@]}" \
        --deadline-s "$deadline" \
        --per-gpu "${SUITE_PER_GPU:-1}" 2>&1 | tee -a "$out/suite.log"
    pack_store "$out/suite/suite.db" "$out/suite/$tag-suite.db.gz"
    export_baselines
}

stage_suitewarm() {
    # The same bench from an empty results store, the committed baselines imported first; its
    # call ledger and store go on over calls and machines (commit what OUTDIR/suitewarm holds).
    launch_floor suitewarm || return 0
    unpack_store "$warm_store" "$out/suitewarm/suite.db"
    seed_from_results "$tag-warm-suite-calls.jsonl" "$out/suitewarm/$tag-warm-suite-calls.jsonl"
    import_baselines
    "$python" benchmarks/suite_gpu.py --name "$tag-warm" "$out/suitewarm" all "${floor_args[@]}" \
        --deadline-s "$deadline" --per-gpu "${SUITE_PER_GPU:-1}" 2>&1 | tee -a "$out/suitewarm.log"
    pack_store "$out/suitewarm/suite.db" "$out/suitewarm/$tag-warm-suite.db.gz"
    export_baselines
}

stage_forge() {
    # The same for the search: its archive (forge.db, gzipped) and the problems it finished.
    unpack_store "$forge_store" "$out/forge/forge.db"
    local part
    for part in forge forge-cuts forge-compose; do
        seed_from_results "$tag-$part.jsonl" "$out/forge/$tag-$part.jsonl"
    done
    import_baselines
    local compose=()
    [ "${FORGE_COMPOSE:-0}" = 1 ] && compose=(--compose)
    [ "${FORGE_COMPOSE:-0}" = 1 ] && [ "${FORGE_SEEDS:-0}" = 1 ] && compose+=(--seeds)
    [ -n "${FORGE_AGAIN:-}" ] && [ "${FORGE_COMPOSE:-0}" != 1 ] && compose+=(--again $FORGE_AGAIN)
    # shellcheck disable=SC2086
    "$python" benchmarks/forge_gpu.py "$out/forge" ${FORGE_PROBLEMS:-} --name "$tag" \
        --deadline-s "$deadline" \
        --per-gpu "${FORGE_PER_GPU:-1}" "${compose[@]}" 2>&1 | tee -a "$out/forge.log"
    pack_store "$out/forge/forge.db" "$out/forge/$tag-forge.db.gz"
    export_baselines
}

stage_hgemm() {
    "$python" benchmarks/hgemm_gpu.py "$out/hgemm" --deadline-s "$deadline" \
        2>&1 | tee -a "$out/hgemm.log"
}

stage_sandbox() {
    "$python" benchmarks/sandbox_cost.py "$out/sandbox-cost.json" --device cuda --evaluate \
        --repeats 5 2>&1 | tee "$out/sandbox.log"
}

stage_floor() {
    "$python" benchmarks/launch_floor.py -o "$out/launch-floor.json" 2>&1 | tee "$out/floor.log"
}

stage_variants() {
    # shellcheck disable=SC2086  # VARIANTS_ARGS is split into the script's arguments
    "$python" benchmarks/variants_gpu.py -o "$out/variants.json" ${VARIANTS_ARGS:---largest 1} 2>&1 \
        | tee "$out/variants.log"
}

stage_timer() {
    "$python" benchmarks/timer_cost.py -o "$out/timer-cost.json" 2>&1 | tee "$out/timer.log"
}

stage_compare() {
    "$python" benchmarks/compare_cost.py -o "$out/compare-cost.json" 2>&1 | tee "$out/compare.log"
}

stage_guards() {
    "$python" benchmarks/guard_cost.py -o "$out/guard-cost.json" 2>&1 | tee "$out/guards.log"
}

stage_gap() {
    "$python" benchmarks/hgemm_gap_probe.py -o "$out/hgemm-gap-probe.json" 2>&1 \
        | tee "$out/gap.log"
}

seed_from_results() {  # FILE DEST: a resumable stage goes on from its committed store
    local file=benchmarks/results/$1
    if [ ! -s "$2" ] && [ -s "$file" ]; then cp "$file" "$2"; fi
}

stage_examples() {
    seed_from_results "$tag-examples.json" "$out/examples.json"
    import_baselines
    local again=()
    for text in ${EXAMPLES_AGAIN:-}; do again+=(--again "$text"); done
    # shellcheck disable=SC2086
    "$python" benchmarks/examples_gpu.py ${EXAMPLES:?set EXAMPLES to the example folders} \
        -o "$out/examples.json" --deadline-s "$deadline" "${again[@]}" 2>&1 \
        | tee -a "$out/examples.log"
    export_baselines
}

fi_site=${FI_SITE:-/tmp/fi_site}
fi_carry=${FI_CARRY:-.fi}/flashinfer-site.tar.xz
fi_aot=${FI_CARRY:-.fi}/flashinfer-aot.tar.xz

use_flashinfer() {  # FlashInfer from FI_SITE on the path of this script and its workers, if there
    [ -d "$fi_site/flashinfer" ] || return 0
    case ":$PYTHONPATH:" in *":$fi_site:"*) ;; *) export PYTHONPATH="$fi_site:$PYTHONPATH" ;; esac
    # FlashInfer's JIT runs `ninja` from PATH: the ninja wheel's, installed beside it
    [ -d "$fi_site/bin" ] && case ":$PATH:" in *":$fi_site/bin:"*) ;; *) export PATH="$fi_site/bin:$PATH" ;; esac
    export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a}
    export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/fi_ws}
}

install_prebuilt() {  # carry_flashinfer_aot.sh's modules into FlashInfer's AOT folder, once
    local aot=$fi_site/flashinfer/data/aot made site
    [ -f "$fi_aot" ] && [ ! -f "$aot/flashinfer-aot.json" ] || return 0
    made=$(tar -xJOf "$fi_aot" flashinfer-aot.json | sed -n 's/.*"flashinfer": "\([^"]*\)".*/\1/p')
    site=$(cd "$fi_site" && ls -d flashinfer_python-*.dist-info 2>/dev/null \
        | sed 's/^flashinfer_python-\(.*\)\.dist-info$/\1/')
    if [ "$made" != "$site" ]; then
        echo "$fi_aot left out: built for FlashInfer $made, the site has ${site:-none}"
        return 0
    fi
    mkdir -p "$aot" && tar -C "$aot" -xJf "$fi_aot"
    echo "installed ahead of time from $fi_aot:" "$(cd "$aot" && ls -d -- */ | tr -d / | paste -sd " ")"
}

stage_flashinfer() {
    if [ ! -d "$fi_site/flashinfer" ]; then
        if [ ! -f "$fi_carry" ]; then
            echo "no $fi_carry: run benchmarks/carry_flashinfer.sh and carry it" \
                | tee "$out/flashinfer.log"
            return 0
        fi
        mkdir -p "$fi_site" && tar -C "$fi_site" -xJf "$fi_carry" 2>&1 | tee "$out/flashinfer.log"
    fi
    install_prebuilt 2>&1 | tee -a "$out/flashinfer.log"
    use_flashinfer
    # the problems already recorded need no module built here, unless they are to be judged again
    local skip=(--skip-recorded "benchmarks/results/$tag-library-baselines.json")
    [ -n "${LIBRARIES_AGAIN:-}" ] && skip=()
    "$python" benchmarks/flashinfer_setup.py -o "$out/flashinfer-setup.json" "${skip[@]}" \
        --deadline-s "$deadline" 2>&1 | tee -a "$out/flashinfer.log"
}

stage_libraries() {
    use_flashinfer
    seed_from_results "$tag-library-baselines.json" "$out/library-baselines.json"
    import_baselines
    # FlashInfer baselines whose modules the flashinfer stage has not built yet wait for it
    local built=()
    [ -f "$out/flashinfer-setup.json" ] && built=(--flashinfer-setup "$out/flashinfer-setup.json")
    # shellcheck disable=SC2086
    "$python" benchmarks/library_baselines_gpu.py -o "$out/library-baselines.json" \
        --deadline-s "$deadline" --problem-limit-s "${LIBRARY_LIMIT_S:-300}" "${built[@]}" \
        ${LIBRARIES_AGAIN:+--again $LIBRARIES_AGAIN} ${LIBRARY_PROBLEMS:-} 2>&1 \
        | tee -a "$out/libraries.log"
    export_baselines
}

stage_phases() {
    "$python" benchmarks/eval_phases.py l1/rmsnorm_llama3_1_8b \
        src/solforge/solutions/l1/rmsnorm_llama3_1_8b/triton_rmsnorm.json --runs 2 \
        --compile-ahead both \
        -o "$out/phases.json" 2>&1 | tee "$out/phases.log"
}

stage_launch() {
    "$python" benchmarks/hgemm_launch_host.py --device cuda --calls 2000 \
        -o "$out/hgemm-launch-host.json" 2>&1 | tee "$out/launch.log"
}

stage_ipc() {
    "$python" benchmarks/cuda_ipc_probe.py -o "$out/ipc-probe.jsonl" 2>&1 | tee "$out/ipc.log"
}

for stage in "${stages[@]}"; do
    case $stage in
        env) run_stage env environment.txt stage_env ;;
        tests) run_stage tests "" stage_tests ;;
        calibrate) run_stage calibrate "$tag-measured.json" stage_calibrate ;;
        harness) run_stage harness harness_summary.json stage_harness ;;
        throughput) on_an_h200 throughput && run_stage throughput "" stage_throughput ;;
        sharing) run_stage sharing "" stage_sharing ;;
        suite) on_an_h200 suite && run_stage suite "" stage_suite ;;
        suitewarm) on_an_h200 suitewarm && run_stage suitewarm "" stage_suitewarm ;;
        forge) on_an_h200 forge && run_stage forge "" stage_forge ;;
        hgemm) only_h200 hgemm && run_stage hgemm "" stage_hgemm ;;
        sandbox) run_stage sandbox sandbox-cost.json stage_sandbox ;;
        floor) run_stage floor launch-floor.json stage_floor ;;
        timer) run_stage timer timer-cost.json stage_timer ;;
        compare) run_stage compare compare-cost.json stage_compare ;;
        guards) run_stage guards guard-cost.json stage_guards ;;
        gap) run_stage gap hgemm-gap-probe.json stage_gap ;;
        variants) run_stage variants variants.json stage_variants ;;
        examples) on_an_h200 examples && run_stage examples "" stage_examples ;;
        flashinfer) run_stage flashinfer "" stage_flashinfer ;;
        libraries) on_an_h200 libraries && run_stage libraries "" stage_libraries ;;
        phases) run_stage phases phases.json stage_phases ;;
        ipc) run_stage ipc ipc-probe.jsonl stage_ipc ;;
        launch) run_stage launch hgemm-launch-host.json stage_launch ;;
        *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
