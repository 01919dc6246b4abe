"""One `gate run` of an engine example as the engine benchmarks measure it (benchmarks/engine_llamacpp.py,
benchmarks/engine_vllm.py): exit code, wall time, the record, the verdict line, and the peak memory of
gate and the servers under it (plus any server given by pid), and the most servers alive at once."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        tree.setdefault(ppid, []).append(int(stat.parent.name))
    return tree


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


class MemorySampler(threading.Thread):
    """The peak PSS of a process tree, and the peak drop in available memory, sampled every 0.5 s."""

    def __init__(self, *roots: int) -> None:
        super().__init__(daemon=True)
        self.roots, self.stop = list(roots), threading.Event()
        self.peak_pss_kib, self.baseline = 0, _available_kib()
        self.peak_drop_kib = 0

    def run(self) -> None:
        while not self.stop.is_set():
            tree, todo, total = _children(), list(self.roots), 0
            while todo:
                pid = todo.pop()
                total += _pss_kib(pid)
                todo += tree.get(pid, [])
            self.peak_pss_kib = max(self.peak_pss_kib, total)
            self.peak_drop_kib = max(self.peak_drop_kib, self.baseline - _available_kib())
            self.stop.wait(0.5)


def peak_alive(node: object) -> int:
    """The most servers alive at once: the run's own record (`servers`), else the most any server's evidence
    reports (`engine_servers_alive_peak`)."""
    if isinstance(node, dict) and isinstance(node.get("servers"), dict):
        return int(node["servers"]["alive_peak"])
    found = [0]
    if isinstance(node, dict):
        value = node.get("engine_servers_alive_peak")
        if isinstance(value, int):
            found.append(value)
        found += [peak_alive(v) for v in node.values()]
    elif isinstance(node, list):
        found += [peak_alive(v) for v in node]
    return max(found)


def run(
    manifest: Path, out: Path, env: dict[str, str], *also: int
) -> tuple[int, float, dict[str, object] | None, str, MemorySampler]:
    gate = Path(sys.executable).parent / "gate"
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(gate), "run", str(manifest), "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    sampler = MemorySampler(proc.pid, *also)
    sampler.start()
    stdout, stderr = proc.communicate()
    sampler.stop.set()
    sampler.join()
    seconds = time.perf_counter() - started
    results = out / "results.json"
    record = json.loads(results.read_text()) if results.exists() else None
    text = stdout.decode(errors="replace")
    verdict = next((ln for ln in text.splitlines() if ln.startswith("verdict")), stderr.decode()[-300:].strip())
    return proc.returncode or 0, seconds, record, verdict.replace("|", "/"), sampler
