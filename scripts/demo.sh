#!/usr/bin/env bash
# The main job: set up, then run the two faces' walkthroughs on data generated locally:
#  1. insitubatch: the product description's quickstart for two epochs on a local
#     ERA5-shaped store written (once) by zarr-python; arguments go to this one;
#  2. planfetch: a prefetching DataLoader over images in an S3 server (moto) that the demo
#     starts on 127.0.0.1 and stops (torch's CPU build is installed into .venv if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/python examples/quickstart_local.py "$@"
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  pin=$(grep -o '^torch==[^ ]*' requirements/frameworks.txt)  # the one torch build the tests use
  echo "demo: installing $pin (CPU) into .venv for the planfetch demo"
  .venv/bin/python -m pip install -q "$pin"
fi
exec .venv/bin/python examples/planfetch_s3_demo.py
