#!/usr/bin/env bash
# The main job: set up, generate (once) a local ERA5-shaped store with zarr-python, and run
# the product description's quickstart on it for two epochs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python examples/quickstart_local.py "$@"
