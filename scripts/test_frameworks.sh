#!/usr/bin/env bash
# Runs the framework adapter tests, one framework per pytest process: torch, JAX and
# TensorFlow load duplicate OpenMP/XLA/protobuf runtimes and must not share a process.
#   torch (CPU), JAX (CPU), Ray -> the main virtualenv .venv (installed here if missing)
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

PY=.venv/bin/python
TFPY=.venv-tf/bin/python

# What each environment installs lies in requirements/ (frameworks.txt, examples*.txt, tf.txt).
stamp_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

# -- torch + JAX in the main virtualenv (never imported in one process) ---------------------
have_frameworks() {
  "$PY" -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('torch') and u.find_spec('jax')))"
}
want=$(stamp_of requirements/frameworks.txt)
if [[ $(cat .venv/.frameworks.sha 2>/dev/null) != "$want" ]] || ! have_frameworks; then
  echo "test_frameworks: installing requirements/frameworks.txt into .venv"
  "$PY" -m pip install -q -r requirements/frameworks.txt
  echo "$want" > .venv/.frameworks.sha
fi

# -- what the examples need beside torch ----------------------------------------------------
want=$(stamp_of requirements/examples.txt requirements/examples-nodeps.txt)
if [[ $(cat .venv/.examples.sha 2>/dev/null) != "$want" ]]; then
  echo "test_frameworks: installing the examples' dependencies into .venv"
  "$PY" -m pip install -q -r requirements/examples.txt
  "$PY" -m pip install -q --no-deps -r requirements/examples-nodeps.txt
  echo "$want" > .venv/.examples.sha
fi

# -- TensorFlow's own virtualenv --------------------------------------------------------------
if [[ ! -x $TFPY ]]; then
  echo "test_frameworks: creating .venv-tf"
  "${PYTHON:-python3}" -m venv .venv-tf
fi
want=$(stamp_of requirements/tf.txt)
if [[ $(cat .venv-tf/.requirements.sha 2>/dev/null) != "$want" ]]; then
  echo "test_frameworks: installing requirements/tf.txt into .venv-tf"
  "$TFPY" -m pip install -q --upgrade pip
  "$TFPY" -m pip install -q -r requirements/tf.txt
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
INSITU_EXAMPLES_REQUIRED=1 run "$PY" torch tests/frameworks/test_examples_torch.py
run "$PY" jax tests/frameworks/test_examples_jax.py
TF_CPP_MIN_LOG_LEVEL=2 run "$TFPY" tensorflow tests/frameworks/test_examples_tf.py

if ((${#failed[@]})); then
  echo "test_frameworks: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "test_frameworks: all framework adapter tests passed"
