#!/usr/bin/env bash
# lookuplinear on a GPU, in one unattended command (each step has a time limit: 9 minutes in all):
#
#     bash benchmarks/gpu.sh OUT_DIR
#
# from the repository root or anywhere, with the Python whose torch is a CUDA build ($PYTHON,
# default python3); nothing is installed or downloaded. Steps, each bounded by a timeout and
# logged into OUT_DIR, each run whether the one before passed or not:
#
#   1. build.log   the C kernels and the C++ operators, built in place (setup.py compiles the
#                  .cu files of src/lookuplinear/ops/csrc too where nvcc and a CUDA torch are
#                  found; a failed build, or a library whose errors crash the process, leaves
#                  the operators registered from Python). The build took 68-72 s on a
#                  16-core Xeon with g++ 13: BUILD_SECONDS (default 270) is the step's limit.
#                  Where the build refused the library, summary.txt says what it was built
#                  with; where CXX names another compiler than the g++ on the PATH, it is
#                  built again with that one (CC=gcc CXX=g++, appended to build.log); where
#                  it is still refused, benchmarks/gpu_raise.py --minimal
#                  probes it and a one-operator library under a debugger (last, after the
#                  benchmark, appended to build.log);
#   2. tests.log   the suite's CUDA tests: every test whose id names cuda (pytest -k cuda: the
#                  "cuda" device parameter of tests/forms.py, and the tests written for CUDA),
#                  in 8 processes where pytest-xdist imports (a device-side assert ends its
#                  process's CUDA context: the tests after it in that process fail too);
#      ops.log     the operators' own tests (tests/test_cpp_ops.py, tests/test_library.py) with
#                  the extension built here;
#   3. bench.log   benchmarks/bench_gpu.py: lookuplinear's layers and collection against
#                  nn.EmbeddingBag (and FBGEMM's TBE where fbgemm_gpu imports), written to
#                  bench_gpu.json and bench_gpu.txt, and the single table's models under
#                  torch.profiler to profile.txt;
#
# and summary.txt: the GPU, torch, nvcc, each step's exit status, the tests' last lines. The
# exit status is 0 where every step passed.
#
#     bash benchmarks/gpu.sh --dry-run OUT_DIR
#
# checks the script on a machine without a GPU (tests/test_gpu.py): no build, the CUDA tests of
# one file collected only, the benchmark's --dry-run (the CPU, tiny sizes).
set -u -o pipefail

dry=0
if [ "${1:-}" = "--dry-run" ]; then
    dry=1
    shift
fi
if [ $# -ne 1 ]; then
    echo "usage: bash benchmarks/gpu.sh [--dry-run] OUT_DIR" >&2
    exit 2
fi
mkdir -p "$1" || exit 2
out=$(cd "$1" && pwd)
cd "$(dirname "$0")/.." || exit 2
py=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
summary="$out/summary.txt"
failed=0

# step NAME SECONDS COMMAND...: run COMMAND under a timeout, its output in OUT_DIR/NAME.log
step() {
    local name=$1 seconds=$2 start rc
    shift 2
    start=$(date +%s)
    timeout "$seconds" "$@" >"$out/$name.log" 2>&1
    rc=$?
    echo "$name: exit $rc in $(( $(date +%s) - start )) s$([ $rc -eq 124 ] && echo \
        " (stopped at its ${seconds} s limit)")" >>"$summary"
    [ $rc -eq 0 ] || failed=1
}

{
    echo "lookuplinear on a GPU: $(date -u '+%Y-%m-%d %H:%M UTC')$([ $dry -eq 1 ] && echo ', dry run')"
    echo "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
        2>/dev/null || echo 'none (nvidia-smi not found)')"
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -n 1 || true)"
    "$py" - <<'EOF' 2>&1
import sys
import torch
seen = torch.cuda.get_device_name() if torch.cuda.is_available() else None
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"torch sees: {seen}")
EOF
} >"$summary"

if [ $dry -eq 0 ]; then
    step build "${BUILD_SECONDS:-270}" "$py" setup.py build_ext --inplace --parallel "$(nproc)"
    refused=$(grep -h "did not survive an error" "$out/build.log")
    if [ -n "$refused" ]; then
        # what the refused library was built with, and the C++ runtime the process loads
        {
            echo "$refused"
            echo "toolchain: CC=${CC:-unset} CXX=${CXX:-unset}; ${CXX:-c++}: $(${CXX:-c++} \
                --version 2>&1 | head -n 1); g++ on the PATH ($(command -v g++)): $(g++ \
                --version 2>&1 | head -n 1)"
            for lib in build/temp*/_C*.refused; do
                echo "$lib: $(nm -D --defined-only "$lib" 2>/dev/null | c++filt \
                    | grep -c -E 'std::(basic_ostream|codecvt|locale)') libstdc++ symbols defined"
            done
            "$py" -c 'import torch
print("the process loads:", *sorted({l.split()[-1] for l in open("/proc/self/maps")
                                     if "libstdc++" in l}))' 2>&1
        } >>"$summary"
        # again with the compiler on the PATH where CXX named another one
        if [ -n "${CXX:-}" ] && [ "$(command -v g++)" != "$(command -v "$CXX")" ]; then
            CC=gcc CXX=g++ step rebuild "${BUILD_SECONDS:-270}" "$py" setup.py build_ext \
                --inplace --force --parallel "$(nproc)"
            grep -q "did not survive an error" "$out/rebuild.log" || refused=""
            { echo "== the build again with CC=gcc CXX=g++"; cat "$out/rebuild.log"; } \
                >>"$out/build.log" && rm -f "$out/rebuild.log"
        fi
    fi
    "$py" -c 'import torch, lookuplinear.ops.library as l, lookuplinear.ops._extension as e
cuda = torch._C._dispatch_has_kernel_for_dispatch_key("lookuplinear::assert_bags", "CUDA")
print(f"C++ operators loaded: {l.CPP}" + (f", CUDA kernels (asserts.cu) built: {cuda}" if l.CPP
      else f" ({e.PROBLEM})"))' >>"$summary" 2>&1
    # a process per test file's worth (pytest-xdist, where it imports): a device-side assert
    # ends its process's CUDA context, and fails only the tests after it in that process
    xdist=()
    # (pytest-benchmark, where installed, warns under xdist, which the suite makes an error)
    "$py" -c "import xdist" 2>/dev/null && xdist=(-n 8 --dist loadfile -p no:benchmark)
    step tests 130 "$py" -m pytest tests -k cuda -q -p no:cacheprovider "${xdist[@]}" \
        --continue-on-collection-errors
    # -v: each test's outcome as it ends, so that a step cut at its limit still names them
    step ops 150 "$py" -m pytest tests/test_cpp_ops.py tests/test_library.py \
        -k "not cuda and not aoti" -v -p no:cacheprovider "${xdist[@]}"
    step bench 60 "$py" benchmarks/bench_gpu.py --profile --out "$out"
    if [ -n "$refused" ]; then
        # the refused library and a minimal one under a debugger, appended to build.log
        step raise 180 "$py" benchmarks/gpu_raise.py --minimal
        cat "$out/raise.log" >>"$out/build.log" && rm -f "$out/raise.log"
    fi
else
    step tests 120 "$py" -m pytest tests/test_library.py -k cuda -q -p no:cacheprovider \
        --collect-only
    step bench 100 "$py" benchmarks/bench_gpu.py --dry-run --profile --out "$out"
fi

# each test step's outcome: pytest's last count line, and where the process died, the test
for log in tests ops; do
    [ -f "$out/$log.log" ] || continue
    echo "$log: $(grep -E '[0-9]+ (passed|failed|error)|tests? collected|no tests ran' "$out/$log.log" | tail -n 1)" \
        >>"$summary"
    grep -h -A 12 "Fatal Python error" "$out/$log.log" | grep -oE "Fatal Python error.*|File .*tests/.*" \
        | head -n 2 | sed "s/^/$log: /" >>"$summary"
done
cat "$summary"
[ -f "$out/bench_gpu.txt" ] && cat "$out/bench_gpu.txt"
exit $failed
