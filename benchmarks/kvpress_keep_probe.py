"""What a kvpress release's KnormPress keeps, judged by evict-invariants, without a model.

kvpress pins transformers<5.3, so it is not importable in the main environment. This probe loads
only the press modules it needs from an unpacked kvpress wheel (`pip download --no-deps
kvpress==X -d DIR && unzip DIR/*.whl -d DIR/x`), runs the press's own `compress` on seeded random
bfloat16 keys through gate's kvpress reader (gate.adapters.hf.kvpress_path.watch_press), and
judges the eviction with evict-invariants' judgement (gate recomputes minus the key norm in float32):

    python benchmarks/kvpress_keep_probe.py /tmp/kvp-0.5.4/x   # evict-ranking on every head
    python benchmarks/kvpress_keep_probe.py /tmp/kvp-0.5.5/x   # holds

Exit 1 when an invariant is broken.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

MODULES = ("utils.py", "presses/base_press.py", "presses/scorer_press.py", "presses/knorm_press.py")


def main(unpacked: str, tokens: int = 512, heads: int = 8) -> int:
    src = Path(unpacked) / "kvpress"
    with tempfile.TemporaryDirectory() as tmp:
        for rel in (*MODULES, "__init__.py", "presses/__init__.py"):
            dest = Path(tmp) / "kvpress" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if rel in MODULES:
                shutil.copy(src / rel, dest)
            else:
                dest.touch()  # the package's own __init__ imports every press and its dependencies
        sys.path.insert(0, tmp)
        import torch
        from kvpress.presses.knorm_press import KnormPress  # type: ignore[import-not-found]

        from gate.adapters.hf.kvpress_path import press_policy, watch_press
        from gate.checks.evict_invariants.body import Judgement, Step, judge_step

        torch.manual_seed(0)
        press = KnormPress(compression_ratio=0.5)
        watch_press(SimpleNamespace(press=press))  # type: ignore[arg-type]
        log: list = []
        press.gate_watching = log
        keys = torch.randn(1, heads, tokens, 128).to(torch.bfloat16)
        module = SimpleNamespace(head_dim=128, layer_idx=0)
        press.compress(module, torch.zeros(1, tokens, 16), keys, keys.clone(), None, {})
        j = Judgement()
        judge_step(press_policy(press, 0.5), Step("prefill", "prefill", False, log[0]), 0, 1e-6, j)
        distinct = [int(torch.unique(log[0].scores[0, h]).numel()) for h in range(heads)]
        classes = sorted({f.cls for f in j.findings})
        print(f"KnormPress(0.5) on {tokens} bfloat16 keys x {heads} heads: distinct scores per head {distinct}")
        print(
            f"broken: {classes or 'none'} on {len({f.where['head'] for f in j.findings})} of {heads} heads; "
            f"max |press score - float32 score| {j.score_mismatch:.4g}; ties across the boundary {len(j.ties)}"
        )
        return 1 if j.findings else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
