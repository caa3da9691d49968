#!/usr/bin/env bash
# Runs the framework adapter tests, one framework per pytest process: torch, JAX and
# TensorFlow load duplicate OpenMP/XLA/protobuf runtimes and must not share a process.
#   torch (CPU) and JAX (CPU)  -> the main virtualenv .venv (installed here if missing)
#   TensorFlow (tensorflow-cpu) -> its own virtualenv .venv-tf, with insitubatch installed
#                                  from a wheel of this tree
# Idempotent: stamp files skip installs that are already current.
#   scripts/test_frameworks.sh              runs scripts/setup.sh first (builds the package)
#   scripts/test_frameworks.sh --no-setup   when the caller already ran it (scripts/test.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} != "--no-setup" ]]; then
  scripts/setup.sh
fi

TORCH_REQS=("torch==2.13.0" "jax" "jaxlib" "pytorch-lightning>=2.4" "torchdata==0.11.0" "ray[data]==2.60.0")  # torch 2.13.0's CPU build lies on this machine's disk
TF_REQS=("tensorflow-cpu>=2.16" "numpy>=1.26" "zarr>=3.1,<4" "numcodecs>=0.16" "crc32c>=2.7"
         "pytest>=8" "pytest-timeout>=2.3")
PY=.venv/bin/python
TFPY=.venv-tf/bin/python

stamp_of() { printf '%s\n' "$@" | sha256sum | cut -d' ' -f1; }

# -- torch + JAX in the main virtualenv (never imported in one process) ---------------------
have_frameworks() {
  "$PY" -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('torch') and u.find_spec('jax')))"
}
want=$(stamp_of "${TORCH_REQS[@]}")
if [[ $(cat .venv/.frameworks.sha 2>/dev/null) != "$want" ]] || ! have_frameworks; then
  echo "test_frameworks: installing ${TORCH_REQS[*]} into .venv"
  "$PY" -m pip install -q "${TORCH_REQS[@]}"
  echo "$want" > .venv/.frameworks.sha
fi

# -- what the microscopy example needs beside torch: ome-zarr (to write OME-NGFF) and
# scikit-image (the Otsu baseline). ome-zarr is installed without its dependencies: its
# fsspec[s3] extra would pull aiobotocore, which pins a botocore older than boto3's.
EXAMPLE_REQS=("dask" "toolz" "scikit-image" "deprecated" "pydantic" "rangehttpserver" "requests" "aiohttp")
EXAMPLE_NODEPS=("ome-zarr==0.18.0" "ome-zarr-models==1.7")
want=$(stamp_of "${EXAMPLE_REQS[@]}" "${EXAMPLE_NODEPS[@]}")
if [[ $(cat .venv/.examples.sha 2>/dev/null) != "$want" ]]; then
  echo "test_frameworks: installing the examples' dependencies into .venv"
  "$PY" -m pip install -q "${EXAMPLE_REQS[@]}"
  "$PY" -m pip install -q --no-deps "${EXAMPLE_NODEPS[@]}"
  echo "$want" > .venv/.examples.sha
fi

# -- TensorFlow's own virtualenv --------------------------------------------------------------
if [[ ! -x $TFPY ]]; then
  echo "test_frameworks: creating .venv-tf"
  "${PYTHON:-python3}" -m venv .venv-tf
fi
want=$(stamp_of "${TF_REQS[@]}")
if [[ $(cat .venv-tf/.requirements.sha 2>/dev/null) != "$want" ]]; then
  echo "test_frameworks: installing ${TF_REQS[*]} into .venv-tf"
  "$TFPY" -m pip install -q --upgrade pip
  "$TFPY" -m pip install -q "${TF_REQS[@]}"
  echo "$want" > .venv-tf/.requirements.sha
fi

# The package as scripts/setup.sh installed it into .venv: rebuild the wheel only when that
# install changed (its RECORD lists every file's hash). The build reuses setup.sh's build dir.
want=$("$PY" -c "import hashlib, importlib.metadata as m
print(hashlib.sha256(m.distribution('insitubatch').read_text('RECORD').encode()).hexdigest())")
if [[ $(cat .venv-tf/.insitubatch.sha 2>/dev/null) != "$want" ]]; then
  echo "test_frameworks: building the insitubatch wheel for .venv-tf"
  rm -f build/wheels/insitubatch-*.whl
  "$PY" -m pip wheel -q --no-build-isolation --no-deps -w build/wheels .
  "$TFPY" -m pip install -q --no-deps --force-reinstall build/wheels/insitubatch-*.whl
  echo "$want" > .venv-tf/.insitubatch.sha
fi

# -- the tests: each framework in its own process -------------------------------------------
failed=()
run() {  # <python> <framework module> <test file>
  local py=$1 module=$2 file=$3
  echo "== $file ($module, $py)"
  # A framework that fails to import would make importorskip skip the whole file: refuse.
  if ! "$py" -c "import $module" >/dev/null 2>&1; then
    echo "test_frameworks: $module does not import in $py" >&2
    failed+=("$file")
    return
  fi
  # pytest exits 5 when it collects nothing, which fails here too.
  "$py" -m pytest -q -p no:cacheprovider "$file" || failed+=("$file")
}
run "$PY" torch tests/frameworks/test_torch.py
run "$PY" torch tests/frameworks/test_planfetch_torch.py
run "$PY" pytorch_lightning tests/frameworks/test_lightning.py
run "$PY" jax tests/frameworks/test_jax.py
run "$PY" ray tests/frameworks/test_ray.py
TF_CPP_MIN_LOG_LEVEL=2 run "$TFPY" tensorflow tests/frameworks/test_tf.py
run "$PY" torch tests/frameworks/test_examples_torch.py
run "$PY" jax tests/frameworks/test_examples_jax.py
TF_CPP_MIN_LOG_LEVEL=2 run "$TFPY" tensorflow tests/frameworks/test_examples_tf.py

if ((${#failed[@]})); then
  echo "test_frameworks: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "test_frameworks: all framework adapter tests passed"
