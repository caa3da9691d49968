"""The JAX forecasting example at small size beats persistence."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")

from examples_util import SMALL_FORECAST, check_forecast, load_example  # noqa: E402


def test_forecasting_with_jax_beats_persistence(tmp_path):
    check_forecast(load_example("forecasting/train_jax.py").main(SMALL_FORECAST + ["--data", str(tmp_path / "era5.zarr")]))
