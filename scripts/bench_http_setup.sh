#!/usr/bin/env bash
# Installs what bench/http_bench.py needs beyond scripts/setup.sh: nginx from Debian (a C
# HTTP server to read from on loopback) and obstore (the peer) into .venv. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO="sudo"
if ! command -v nginx >/dev/null && [[ ! -x /usr/sbin/nginx ]]; then
  echo "bench_http_setup: installing nginx-light"
  # Keep the package's postinst from starting a system nginx on port 80: the bench starts
  # its own on 127.0.0.1. policy-rc.d is only added (and removed) when none exists.
  policy=/usr/sbin/policy-rc.d
  added_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"
    added_policy=1
  fi
  trap '[[ $added_policy == 1 ]] && $SUDO rm -f "$policy"' EXIT
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
fi

if ! .venv/bin/python -c "import obstore" 2>/dev/null; then
  echo "bench_http_setup: installing requirements/bench-http.txt into .venv"
  .venv/bin/python -m pip install -q -r requirements/bench-http.txt
fi
echo "bench_http_setup: ready (nginx: $( (nginx -v 2>&1 || /usr/sbin/nginx -v 2>&1) | sed 's/.*version: //'))"
