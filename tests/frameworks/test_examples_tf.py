"""The TensorFlow forecasting example at small size beats persistence (in .venv-tf)."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

from examples_util import SMALL_FORECAST, check_forecast, load_example  # noqa: E402


def test_forecasting_with_tensorflow_beats_persistence(tmp_path):
    check_forecast(load_example("forecasting/train_tf.py").main(SMALL_FORECAST + ["--data", str(tmp_path / "era5.zarr")]))
