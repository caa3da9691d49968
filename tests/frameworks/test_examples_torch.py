"""The torch examples at small size: each runs end to end on data it generates, checks its own
values against the writer's library, and its model beats the baseline it prints."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from examples_util import SMALL_FORECAST, check_forecast, load_example, need  # noqa: E402


def test_forecasting_with_torch_beats_persistence(tmp_path):
    result = load_example("forecasting/train_torch.py").main(SMALL_FORECAST + ["--data", str(tmp_path / "era5.zarr")])
    check_forecast(result)


def test_astronomy_streams_fits_in_place_and_beats_the_median_filter(tmp_path):
    need("astropy")
    need("kerchunk")
    results = load_example("astronomy/run.py").main(
        ["--data", str(tmp_path), "--images", "48", "--size", "64", "--spectra", "512", "--wavelengths", "256",
         "--epochs", "3"])
    for kind in ("images", "spectra"):
        r = results[kind]
        assert r["model_rmse"] < r["median_rmse"] < r["noisy_rmse"], (kind, r)
    # Exposures are whole chunks of their files: nothing but the data blocks is read.
    assert results["images"]["read_amplification"] == pytest.approx(1.0)
    # The table's rows carry an unused 4-byte Z beside 2 x 256 floats.
    assert results["spectra"]["read_amplification"] == pytest.approx((2 * 256 + 1) / (2 * 256))
    assert results["images"]["train_samples"] == 36 and results["spectra"]["train_samples"] == 384


def test_microscopy_segments_over_z_and_beats_otsu(tmp_path):
    need("ome_zarr")
    need("skimage")
    result = load_example("microscopy/run.py").main(["--data", str(tmp_path), "--z", "60", "--size", "64", "--epochs", "8"])
    assert result["cnn"] > result["otsu"] + 0.05, result
    assert result["val_slices"] == 18
