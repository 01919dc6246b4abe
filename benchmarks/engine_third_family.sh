#!/usr/bin/env bash
# A third engine family on CPU (issue 46): install each candidate in its own virtual environment, try
# it on gate's tiny model (gate.models.tiny_hf, written to out/engine-third/tiny-hf) and print, per
# engine, the line that stopped it, with install and run seconds. docs/engines.md ("A third engine
# family on CPU") records the result; rerun this when the index carries a newer release.
#   bash benchmarks/engine_third_family.sh [sglang] [openvino] [mistralrs]   (default: all three)
# Each environment is installed once (.venv-sglang, .venv-ovgenai, .venv-mistralrs; a stamp file marks
# a finished install) with torch 2.13.0 first where torch is needed (the CPU build on local disk).
# Exit 0 when every engine asked for was tried (whatever it showed), 1 on an unexpected error (an
# install that failed: see out/engine-third/NAME-install.log). Seconds on the 2 shared cores here
# (2026-12-07): sglang install 104 run 8, openvino install 64 run 9, mistralrs install 4 run 0.
set -euo pipefail
cd "$(dirname "$0")/.."
test -x .venv/bin/python || { echo "run make install first"; exit 1; }
OUT=out/engine-third
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 PYTHONPATH=$PWD
echo "torch==2.13.0" > "$OUT/torch.txt"
TINY=$PWD/$OUT/tiny-hf
[ -f "$TINY/config.json" ] || .venv/bin/python -m gate.models.tiny_hf "$TINY" > /dev/null
ENGINES=("$@")
[ ${#ENGINES[@]} -gt 0 ] || ENGINES=(sglang openvino mistralrs)

install() {  # VENV STEP...: run the steps once, stamp the seconds
  local venv=$1 start; shift
  if [ -f "$venv/.gate-probe" ]; then return 0; fi
  start=$(date +%s)
  rm -rf "$venv"
  python3 -m venv "$venv"
  # pip's stderr (the index's "Location ... is ignored" warnings, resolver notes) goes to a log
  for step in "$@"; do eval "$step" 2>> "$OUT/${venv#.venv-}-install.log"; done
  echo "$(( $(date +%s) - start ))" > "$venv/.gate-probe"
}

last_error() { grep -E "^[A-Za-z_.]*(Error|Exception)[:(]" "$1" | tail -1; }

sglang() {
  local V=.venv-sglang PIP=.venv-sglang/bin/pip log=$OUT/sglang.log start
  install $V \
    "$PIP install -q torch==2.13.0" \
    "$PIP install -q --no-deps sglang==0.5.23" \
    "$PIP install -q -c $OUT/torch.txt fastapi uvicorn uvloop orjson pyzmq psutil requests aiohttp \
       transformers==5.19.0 tokenizers==0.23.2 sentencepiece==0.2.1 pydantic numpy prometheus-client \
       setproctitle msgspec pybase64 python-multipart partial_json_parser interegular packaging einops \
       xxhash tqdm pillow scipy openai==2.8.0 tiktoken watchfiles distro regex zstandard triton ipython \
       dill apache-tvm-ffi==0.1.11 compressed-tensors gguf jsonschema xgrammar soundfile torchvision" \
    "sed -i 's/^@torch.library.register_fake(\"torchvision::\([a-z_]*\)\")/@(torch.library.register_fake(\"torchvision::\1\") if torchvision.extension._has_ops() else (lambda f: f))/' \
       $V/lib/python3.11/site-packages/torchvision/_meta_registrations.py"
  start=$(date +%s)
  # the documented CPU engine (SGLANG_USE_CPU_ENGINE=1); the server is up once GET /v1/models answers
  SGLANG_USE_CPU_ENGINE=1 timeout 300 $V/bin/python -m sglang.launch_server --model-path "$TINY" \
    --device cpu --host 127.0.0.1 --port 30111 --dtype float32 --attention-backend torch_native \
    --grammar-backend none --mem-fraction-static 0.05 --max-total-tokens 8192 --context-length 1024 \
    > "$log" 2>&1 &
  local pid=$! up=no
  while kill -0 $pid 2>/dev/null; do
    if curl -sf http://127.0.0.1:30111/v1/models > /dev/null; then up=yes; break; fi
    sleep 2
  done
  if [ $up = yes ]; then kill $pid; wait $pid || true; fi
  wait $pid 2>/dev/null || true
  echo "sglang 0.5.23: install $(cat $V/.gate-probe)s, run $(( $(date +%s) - start ))s:" \
    "$([ $up = yes ] && echo "serves" || last_error "$log")"
}

openvino() {
  local V=.venv-ovgenai start
  install $V \
    "$V/bin/pip install -q torch==2.13.0" \
    "$V/bin/pip install -q -c $OUT/torch.txt openvino-genai==2026.4.1.0 'optimum-intel[openvino]==2.2.0'" \
    "$V/bin/pip uninstall -q -y torchvision"
  start=$(date +%s)
  [ -f "$OUT/tiny-ov/openvino_model.xml" ] || $V/bin/optimum-cli export openvino --model "$TINY" \
    --task text-generation-with-past --weight-format fp32 "$OUT/tiny-ov" > "$OUT/openvino-export.log" 2>&1
  $V/bin/python - "$OUT/tiny-ov" <<'EOF' > "$OUT/openvino.log" 2>&1
import sys, numpy as np, openvino as ov, openvino_genai as g
outputs = {}
for prefix in (True, False):
    sc = g.SchedulerConfig(); sc.enable_prefix_caching = prefix; sc.cache_size = 1
    pipe = g.ContinuousBatchingPipeline(sys.argv[1], sc, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    cfg = g.GenerationConfig(); cfg.max_new_tokens = 4; cfg.do_sample = False; cfg.logprobs = 3
    seen = []
    for n in (80, 83):  # the second prompt extends the first: a prefix-cache hit when on
        h = pipe.add_request(n, ov.Tensor(np.array([list(range(5, 5 + n))], dtype=np.int64)), cfg)
        while h.get_status() != g.GenerationStatus.FINISHED or h.can_read():
            pipe.step()
            if h.can_read():
                for out in h.read().values():
                    seen.append((list(out.generated_ids), [round(x, 5) for x in out.generated_log_probs]))
                    fields = sorted(a for a in dir(out) if not a.startswith("_"))
    metrics = sorted(a for a in dir(pipe.get_metrics()) if not a.startswith("_"))
    outputs[prefix] = seen
print("per-token output fields:", fields)
print("pipeline metrics:", metrics)
print("tokens and logprobs equal, prefix cache on vs off:", outputs[True] == outputs[False])
EOF
  echo "openvino-genai 2026.4.1.0: install $(cat $V/.gate-probe)s, run $(( $(date +%s) - start ))s:" \
    "$(tr '\n' ';' < "$OUT/openvino.log")"
}

mistralrs() {
  local V=.venv-mistralrs start
  install $V "$V/bin/pip install -q mistralrs==0.9.5"
  start=$(date +%s)
  RAYON_NUM_THREADS=1 RUST_BACKTRACE=0 $V/bin/python - "$TINY" <<'EOF' > "$OUT/mistralrs.log" 2>&1 || true
import sys, mistralrs as m
m.Runner(which=m.Which.Plain(model_id=sys.argv[1], arch=m.Architecture.Llama, dtype=m.ModelDType.F32),
         prefix_cache_n=16, token_source="none")
print("loads")
EOF
  echo "mistralrs 0.9.5: install $(cat $V/.gate-probe)s, run $(( $(date +%s) - start ))s:" \
    "$(grep -x loads "$OUT/mistralrs.log" || last_error "$OUT/mistralrs.log")"
}

for engine in "${ENGINES[@]}"; do
  case $engine in
    sglang | openvino | mistralrs) $engine ;;
    *) echo "unknown engine $engine (sglang, openvino, mistralrs)"; exit 1 ;;
  esac
done
