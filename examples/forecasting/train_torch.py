"""Forecasting with torch: the next step of t2m from the last two steps of t2m, u10, v10.

    python examples/forecasting/train_torch.py                     # 2048 x 181 x 360 (full size)
    python examples/forecasting/train_torch.py --steps 160 --lat 32 --lon 64 --epochs 3
"""

from __future__ import annotations

import sys
import time

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import common  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    args = common.parse_args(argv, __doc__.splitlines()[0])
    import torch

    torch.manual_seed(0)
    common.make_store(args.data, args.steps, args.lat, args.lon)
    ds, inputs = common.dataset(args.data, args.batch_size)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(common.channels(inputs), 32, 5, padding=2, padding_mode="circular"), torch.nn.GELU(),
        torch.nn.Conv2d(32, 32, 3, padding=1, padding_mode="circular"), torch.nn.GELU(),
        torch.nn.Conv2d(32, 1, 3, padding=1, padding_mode="circular"))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    t0, samples = time.perf_counter(), 0
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        for batch in ds.train:
            x = torch.from_numpy(common.normalized_inputs(batch.arrays, inputs))
            y = torch.from_numpy(common.target_delta(batch.arrays))
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            samples += len(batch)
    scores = common.Scores()
    with torch.no_grad():
        for batch in ds.val:
            delta = model(torch.from_numpy(common.normalized_inputs(batch.arrays, inputs))).numpy()
            scores.add(batch.arrays, delta)
    ds.close()
    return scores.report("torch", samples, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
