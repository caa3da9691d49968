"""The TensorFlow adapter against real TF (its own virtualenv, .venv-tf): one CPU copy per
variable, as_tf_dataset's output_signature and round trip, and a Keras layer that learns."""

from __future__ import annotations

import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")

from fwtest_util import add_index, expected, first_batch, run_without  # noqa: E402

from insitubatch import Batch, as_tf_dataset, to_tf  # noqa: E402
from insitubatch.frameworks.tf import output_signature  # noqa: E402

TF_DTYPES = {"x": tf.float32, "label": tf.int64, "mask": tf.bool, "code": tf.uint8}


def test_to_tf_types_shapes_values(mixed):
    open_dataset, sources = mixed
    batch = first_batch(open_dataset().train)
    tensors = to_tf(batch)
    assert set(tensors) == set(batch.arrays) == set(sources)
    for label, t in tensors.items():
        assert isinstance(t, tf.Tensor)
        assert t.dtype == TF_DTYPES[label]
        assert tuple(t.shape) == batch.arrays[label].shape == (6, *sources[label].shape[1:])
        np.testing.assert_array_equal(t.numpy(), expected(sources, batch, label), strict=True)


def test_to_tf_takes_a_copy_that_outlives_everything(mixed):
    open_dataset, sources = mixed
    ds = open_dataset()
    batch = first_batch(ds.train)
    want = expected(sources, batch, "x")
    t = to_tf(batch)["x"]
    batch.arrays["x"][...] = 0  # the tensor is TF's own copy
    del ds, batch
    gc.collect()
    for b in open_dataset().all:
        b.arrays["x"][...] = -1.0
    np.testing.assert_array_equal(t.numpy(), want, strict=True)


def test_output_signature_from_view_geometries(mixed):
    open_dataset, sources = mixed
    ds = open_dataset()
    want = {label: tf.TensorSpec((None, *values.shape[1:]), TF_DTYPES[label])
            for label, values in sources.items()}
    assert output_signature(ds.val) == want
    assert as_tf_dataset(ds.val).element_spec == want
    assert int(as_tf_dataset(ds.train).cardinality()) == len(ds.train) == 11
    assert as_tf_dataset(ds.val, prefetch=0).element_spec == want


def test_as_tf_dataset_round_trip(mixed):
    open_dataset, sources = mixed
    ds = open_dataset()
    tfds = as_tf_dataset(ds.val)
    for _ in range(2):  # each iteration of the tf.data.Dataset is a new pass
        items = list(tfds)
        assert len(items) == len(ds.val) == 2
        for label, values in sources.items():
            got = np.concatenate([item[label].numpy() for item in items])
            np.testing.assert_array_equal(got, values[64:72], strict=True)  # val = chunk 8, in order


def test_as_tf_dataset_converts_model_inputs_only(mixed):
    """Labels a batch transform adds are not in the view's geometry, so not in the signature."""
    open_dataset, sources = mixed
    ds = open_dataset(batch_transforms=[add_index])
    items = list(as_tf_dataset(ds.all, prefetch=0))
    assert all(set(item) == set(sources) for item in items)
    got = np.concatenate([item["x"].numpy() for item in items])
    np.testing.assert_array_equal(got, sources["x"], strict=True)


def test_as_tf_dataset_names_a_declared_array_a_batch_lacks(mixed):
    open_dataset, _ = mixed

    def drop_x(batch):
        return Batch({k: v for k, v in batch.arrays.items() if k != "x"}, batch.sample_indices, batch.offsets)

    tfds = as_tf_dataset(open_dataset(batch_transforms=[drop_x]).val)
    with pytest.raises(tf.errors.OpError, match=r"a batch lacks \['x'\]"):
        list(tfds)


def test_as_tf_dataset_argument_checks(mixed):
    open_dataset, _ = mixed
    view = open_dataset().val
    with pytest.raises(ValueError, match="prefetch"):
        as_tf_dataset(view, prefetch=-1)
    with pytest.raises(TypeError, match="prefetch"):
        as_tf_dataset(view, prefetch=None)
    with pytest.raises(TypeError, match="Batch"):
        to_tf({"x": np.zeros(3)})


def test_to_tf_of_transform_output():
    base = np.arange(24, dtype="f4").reshape(4, 6)
    tensors = to_tf(Batch({"s": base.astype(">f4"), "t": base[:, ::2]}, np.arange(4)))
    np.testing.assert_array_equal(tensors["s"].numpy(), base)
    np.testing.assert_array_equal(tensors["t"].numpy(), base[:, ::2])


def test_keras_dense_learns_from_the_store(linear):
    tf.keras.utils.set_random_seed(0)
    ds = linear()
    pairs = as_tf_dataset(ds.train).map(lambda item: (item["features"], item["target"]))
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    history = model.fit(pairs, epochs=4, shuffle=False, verbose=0)
    losses = history.history["loss"]
    assert len(losses) == 4
    assert losses[-1] < 0.01 * losses[0]
    val = model.evaluate(as_tf_dataset(ds.val).map(lambda item: (item["features"], item["target"])),
                         verbose=0)
    assert val < 0.01


def test_missing_tensorflow_names_the_extra():
    for call in ("insitubatch.to_tf(batch)", "insitubatch.as_tf_dataset(None)"):
        message = run_without("tensorflow", call)
        assert ("insitubatch.frameworks needs TensorFlow; install it with:"
                " pip install 'insitubatch[tf]'") in message
