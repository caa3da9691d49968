"""Forecasting with JAX: the next step of t2m from the last two steps of t2m, u10, v10.

    python examples/forecasting/train_jax.py                     # 2048 x 181 x 360 (full size)
    python examples/forecasting/train_jax.py --steps 160 --lat 32 --lon 64 --epochs 3
"""

from __future__ import annotations

import sys
import time

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import common  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    args = common.parse_args(argv, __doc__.splitlines()[0])
    import jax
    import jax.numpy as jnp

    common.make_store(args.data, args.steps, args.lat, args.lon)
    ds, inputs = common.dataset(args.data, args.batch_size)

    def conv(x, w, b):  # NCHW activations, OIHW kernels
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME") + b[None, :, None, None]

    def forward(params, x):
        for i, (w, b) in enumerate(params):
            x = conv(x, w, b)
            if i < len(params) - 1:
                x = jax.nn.gelu(x)
        return x

    def init(key, shapes):
        params = []
        for out, inp, k in shapes:
            key, sub = jax.random.split(key)
            params.append((jax.random.normal(sub, (out, inp, k, k)) * (2.0 / (inp * k * k)) ** 0.5, jnp.zeros(out)))
        return params

    params = init(jax.random.PRNGKey(0), [(32, common.channels(inputs), 5), (32, 32, 3), (1, 32, 3)])
    loss = lambda p, x, y: jnp.mean((forward(p, x) - y) ** 2)  # noqa: E731

    @jax.jit
    def step(params, m, v, t, x, y):  # Adam, written out
        grads = jax.grad(loss)(params, x, y)
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, grads)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, grads)
        scale = 2e-3 * jnp.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        params = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + 1e-8), params, m, v)
        return params, m, v

    m = jax.tree.map(jnp.zeros_like, params)
    v = jax.tree.map(jnp.zeros_like, params)
    predict = jax.jit(forward)
    t0, samples, t = time.perf_counter(), 0, 0
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        for batch in ds.train:
            t += 1
            x = jnp.asarray(common.normalized_inputs(batch.arrays, inputs))
            y = jnp.asarray(common.target_delta(batch.arrays))
            params, m, v = step(params, m, v, t, x, y)
            samples += len(batch)
    scores = common.Scores()
    for batch in ds.val:
        delta = np.asarray(predict(params, jnp.asarray(common.normalized_inputs(batch.arrays, inputs))))
        scores.add(batch.arrays, delta)
    ds.close()
    return scores.report("jax", samples, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
