#!/bin/bash
# The GPU checks in one run that ends by a deadline: examples/gpu_check.py (every model, CPU
# against CUDA), then the scaling benchmark's rows on CUDA (N = 10^4 and 10^5: stochastic,
# collapsed L-BFGS, the collapsed probe, then 10^3), while the same machine's CPU rows
# (N = 10^3, 10^4, one thread each) run beside them on other cores. Each benchmark row is one
# `bench_scale.py --one` process under a timeout cut to the time left (SIGTERM ends a fit
# gracefully and its row is kept); the rows gather in $OUT/rows.jsonl as each one ends.
#
#   OUT=results/gpu bash examples/gpu_bench.sh
#   then, per line of rows.jsonl a file:  python examples/bench_scale.py --rows-from ROW_FILES --out results
#
# Environment: OUT (required), DEADLINE (seconds, default 500), DEV (default cuda), PY (python3),
# SIZES_SMALL / MID / BIG (frames), CPU_METHODS (the CPU rows' methods). On a machine without
# network, wheels in .whl/ are installed into a temporary folder first (unless NOWHL is set).
# Writes device.log (versions, gpu_check's table, each row's exit status and time),
# gpu_check.json, bench_cpu.log / bench_cuda.log (the traces) and rows.jsonl.
set -u
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
DEV=${DEV:-cuda}
DEADLINE=${DEADLINE:-500}
SIZES_SMALL=${SIZES_SMALL:-"1000 10000"}
BIG=${BIG:-100000}
MID=${MID:-10000}
CPU_METHODS=${CPU_METHODS:-"stochastic collapsed-lbfgs collapsed"}
T0=$(date +%s)
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }
if [ -d .whl ] && [ -z "${NOWHL:-}" ]; then
  SITE=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 3
  export PYTHONPATH=$SITE
fi
# a plain checkout is the package: make `import tandem` find it
PK=$(mktemp -d) && ROWS=$(mktemp -d) && GC=$(mktemp -d) && ln -s "$PWD" "$PK/tandem"
export PYTHONPATH=$PK${PYTHONPATH:+:$PYTHONPATH}
PY=${PY:-python3}
L=$OUT/device.log
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1; nproc; lscpu | grep 'Model name';
  $PY -c "import sys, torch, pyro, arviz, numpy; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'pyro', pyro.__version__, 'arviz', arviz.__version__, 'numpy', numpy.__version__, 'gpu', torch.cuda.get_device_name() if torch.cuda.is_available() else None)"; } >> "$L" 2>&1
gather() { cat $ROWS/*.json > "$OUT/rows.jsonl.part" 2>/dev/null; mv -f "$OUT/rows.jsonl.part" "$OUT/rows.jsonl"; }
B="examples/bench_scale.py --seed 0 --min-epochs 2 --min-time 2"
row() {   # row DEVICE METHOD N TIMEOUT_S extra args...
  local dev=$1 m=$2 n=$3 t; t=$(cap "$4"); shift 4
  if [ "$t" -lt 15 ]; then echo "skipped $m $n $dev: $(left) s left" >> "$L"; return; fi
  local s=$(date +%s)
  timeout -s TERM -k 10 "$t" $PY $B --one "$m" "$n" "$dev" "$@" > "$ROWS/$dev-$m-$n.json" 2>> "$OUT/bench_$dev.log"
  echo "row $dev $m $n: rc $? in $(( $(date +%s) - s )) s (timeout $t)" >> "$L"; gather
}
# CPU rows of this machine, one thread each, all at once on separate cores (background)
for n in $SIZES_SMALL; do
  for m in $CPU_METHODS; do
    ( export OMP_NUM_THREADS=1; row cpu $m $n 240 --max-cpu 30 --lbfgs-max-cpu 60 --collapsed-max-cpu 10 ) &
  done
done
# the accelerator: the GPU check first, then the benchmark rows, largest questions first
export OMP_NUM_THREADS=8
s=$(date +%s)
timeout -s TERM -k 10 "$(cap 150)" $PY examples/gpu_check.py --out $GC --no-progress >> "$L" 2>&1
echo "gpu_check: rc $? in $(( $(date +%s) - s )) s" >> "$L"; cp $GC/gpu_check.json "$OUT/" 2>/dev/null
row $DEV stochastic $MID 100 --max-cpu 30
row $DEV collapsed-lbfgs $MID 120 --lbfgs-max-cpu 60
row $DEV stochastic $BIG 150 --max-cpu 60
row $DEV collapsed-lbfgs $BIG 220 --lbfgs-max-cpu 140
row $DEV collapsed $MID 60 --collapsed-max-cpu 5
row $DEV stochastic 1000 60 --max-cpu 15
wait
gather
echo "done in $(( $(date +%s) - T0 )) s" >> "$L"
