#!/usr/bin/env bash
# Give a fresh venv .venv's torch (the CPU build the Makefile installs) without installing it again
# (about 50 s and 900 MB each time): links to torch alone in VENV.torch, a folder beside the venv, not
# in it, named by a .pth in the venv. pip counts torch as installed, installs whatever else a package
# requires (torch's own requirements included) and never uninstalls the linked one (it lies outside the
# environment). Usage: bash .ci/torch-links.sh VENV  (from the repository root, after make install)
set -euo pipefail
venv=$(cd "$1" && pwd)
links=$venv.torch
cd "$(dirname "$0")/.."
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -d "$site/torch" ]; then echo "$venv has its own torch: nothing linked"; exit 0; fi
torch_site=$(.venv/bin/python -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
rm -rf "$links" && mkdir -p "$links"
for entry in "$torch_site"/torch "$torch_site"/torchgen "$torch_site"/functorch "$torch_site"/torch-[0-9]*.dist-info; do
  if [ -e "$entry" ]; then ln -s "$entry" "$links/"; fi
done
ls "$links"/torch/__init__.py "$links"/torch-*.dist-info/METADATA >/dev/null  # the package and what pip reads
echo "$links" >"$site/gate-torch-links.pth"
# found there (not imported: torch's own requirements come with the caller's pip install)
"$venv/bin/python" - "$links" <<'PY'
import importlib.util
import sys

origin = importlib.util.find_spec("torch").origin
assert origin.startswith(sys.argv[1] + "/"), f"torch is not the linked build: {origin}"
PY
echo "torch linked into $venv from $torch_site"
