"""TensorFlow adapter.

TF takes one CPU copy per variable (``tf.convert_to_tensor``): its experimental DLPack
mis-handles ownership and aborts under concurrent allocation. TF then places tensors by
its own policy (``/GPU:0`` on a GPU box).
"""

from __future__ import annotations

from typing import Any, Iterator

from .. import arguments
from ..errors import InvalidArgumentError, InvalidTypeError
from . import model_arrays, record_fields, require


def _tf() -> Any:
    return require("tensorflow")


def to_tf(batch: Any) -> dict[str, Any]:
    """``{label: tf.Tensor}`` for a Batch's model-input arrays."""
    tf = _tf()
    return {label: tf.convert_to_tensor(arr) for label, arr in model_arrays(batch).items()}


def output_signature(view: Any) -> dict[str, Any]:
    """``{label: tf.TensorSpec((None, *inner), dtype)}`` from the view's post-transform
    geometries; the batch dimension is None because a split's last batch may be short."""
    tf = _tf()
    specs = {}
    for label, g in view.geometries.items():
        if g.dtype.kind in "SUO":
            raise InvalidTypeError(
                f"{label!r} holds text ({g.dtype}): a framework cannot take it; drop it or encode it"
                " (e.g. as class codes) in a batch transform")
        if not g.dtype.names:
            specs[label] = tf.TensorSpec(shape=(None, *g.inner_shape), dtype=tf.as_dtype(g.dtype), name=None)
            continue
        for name, dtype, sub in record_fields(label, g.dtype):  # one tensor per field, as to_tf
            specs[f"{label}.{name}"] = tf.TensorSpec(shape=(None, *g.inner_shape, *sub),
                                                     dtype=tf.as_dtype(dtype), name=None)
    return specs


def as_tf_dataset(view: Any, prefetch: int = 2) -> Any:
    """A ``tf.data.Dataset`` over ``view`` (e.g. ``ds.val``) through ``from_generator``:
    each iteration of the dataset is one pass of the view, yielding ``{label: Tensor}``
    with the :func:`output_signature` of the view; ``.prefetch(prefetch)`` unless 0. Its
    cardinality is ``len(view)`` (batches per pass)."""
    tf = _tf()
    prefetch = arguments.integer("prefetch", prefetch, (0, None))
    signature = output_signature(view)
    labels = tuple(signature)

    def batches() -> Iterator[dict[str, Any]]:
        it = iter(view)
        try:
            for batch in it:
                arrays = model_arrays(batch)
                missing = [label for label in labels if label not in arrays]
                if missing:
                    raise InvalidArgumentError(f"as_tf_dataset: a batch lacks {missing}, which the view's geometries"
                                   f" declare (batch arrays: {sorted(arrays)})")
                yield {label: arrays[label] for label in labels}
        finally:
            close = getattr(it, "close", None)
            if callable(close):
                close()

    dataset = tf.data.Dataset.from_generator(batches, output_signature=signature)
    if hasattr(view, "__len__"):  # a known length lets Keras size its epochs and progress bar
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(view)))
    return dataset.prefetch(prefetch) if prefetch else dataset


__all__ = ["as_tf_dataset", "output_signature", "to_tf"]
