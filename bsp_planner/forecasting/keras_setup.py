"""TensorFlow/Keras, imported on first use and set up for repeatable CPU training.

Importing TensorFlow takes seconds, so nothing at module level here imports it; `keras()` does, once.
"""

from __future__ import annotations

import os

from ..core.errors import InputError

_READY = False


def default_threads() -> int:
    return max(1, min(os.cpu_count() or 1, 4))


def keras(threads: int | None = None):
    """The keras module (TensorFlow backend), with deterministic ops and a bounded thread pool."""
    global _READY
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    try:
        import keras as _keras
        import tensorflow as tf
    except ModuleNotFoundError as exc:  # the `forecast` extra is optional
        raise InputError(
            "the LSTM forecasters need TensorFlow; install it with `pip install 'bsp-planner[forecast]'`"
        ) from exc
    if not _READY:
        n = threads or default_threads()
        try:
            tf.config.threading.set_intra_op_parallelism_threads(n)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:
            pass  # TensorFlow already started its pools; keep them
        tf.config.experimental.enable_op_determinism()
        tf.get_logger().setLevel("ERROR")
        _READY = True
    return _keras


def seed_everything(seed: int) -> None:
    k = keras()
    k.utils.set_random_seed(int(seed))
