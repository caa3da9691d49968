"""Loads an example script from examples/ as a module, so a test can call its main(argv)."""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(relative: str):
    path = EXAMPLES / relative
    spec = importlib.util.spec_from_file_location(f"example_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def need(module: str) -> ModuleType:
    """pytest.importorskip, but where scripts/test_frameworks.sh installed the examples'
    dependencies (INSITU_EXAMPLES_REQUIRED=1) a missing one fails the test instead of
    skipping it unseen."""
    if os.environ.get("INSITU_EXAMPLES_REQUIRED") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module)


SMALL_FORECAST = ["--steps", "160", "--lat", "32", "--lon", "64", "--epochs", "3"]


def check_forecast(result: dict) -> None:
    """The model's next-step RMSE beats persistence's, clearly (small size, 3 epochs)."""
    assert 0 < result["model_rmse"] < 0.8 * result["persistence_rmse"], result
