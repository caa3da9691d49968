"""Forecasting with TensorFlow (Keras): the next step of t2m from the last two steps of t2m,
u10, v10. Run it in an environment with tensorflow and without torch or JAX.

    python examples/forecasting/train_tf.py                     # 2048 x 181 x 360 (full size)
    python examples/forecasting/train_tf.py --steps 160 --lat 32 --lon 64 --epochs 3
"""

from __future__ import annotations

import sys
import time

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import common  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    args = common.parse_args(argv, __doc__.splitlines()[0])
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    common.make_store(args.data, args.steps, args.lat, args.lon)
    ds, inputs = common.dataset(args.data, args.batch_size)
    model = tf.keras.Sequential([  # channels last: (batch, lat, lon, channels)
        tf.keras.Input((args.lat, args.lon, common.channels(inputs))),
        tf.keras.layers.Conv2D(32, 5, padding="same", activation="gelu"),
        tf.keras.layers.Conv2D(32, 3, padding="same", activation="gelu"),
        tf.keras.layers.Conv2D(1, 3, padding="same")])
    opt = tf.keras.optimizers.Adam(2e-3)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

    def channels_last(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(a, 1, -1))

    t0, samples = time.perf_counter(), 0
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        for batch in ds.train:
            step(channels_last(common.normalized_inputs(batch.arrays, inputs)), channels_last(common.target_delta(batch.arrays)))
            samples += len(batch)
    scores = common.Scores()
    for batch in ds.val:
        delta = model(channels_last(common.normalized_inputs(batch.arrays, inputs)), training=False).numpy()
        scores.add(batch.arrays, np.moveaxis(delta, -1, 1))
    ds.close()
    return scores.report("tensorflow", samples, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
