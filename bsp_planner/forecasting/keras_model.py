"""The LSTMs' Keras side: TensorFlow set up on first use, their networks, the same networks in NumPy
for forecasting from frozen weights, and the base both LSTM forecasters share (save, load, predict).

Importing TensorFlow takes seconds, so nothing at module level here imports it; `keras()` does, once.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Self

import numpy as np

from ..core.errors import InputError
from .base import LearnedForecaster, spec_differences

_READY = False


def keras():
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
        n = max(1, min(os.cpu_count() or 1, 4))
        try:
            tf.config.threading.set_intra_op_parallelism_threads(n)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:
            pass  # TensorFlow already started its pools; keep them
        tf.config.experimental.enable_op_determinism()
        tf.get_logger().setLevel("ERROR")
        _READY = True
    return _keras


@functools.cache
def per_lead_dense_class():
    """A Keras layer mapping (batch, H, D) to (batch, H) with its own weights for each lead time.

    Registered with Keras's serializer (once) so saved models load without custom_objects.
    """
    k = keras()

    @k.saving.register_keras_serializable(package="bsp_planner")
    class PerLeadDense(k.layers.Layer):
        def build(self, input_shape):
            h, d = int(input_shape[1]), int(input_shape[2])
            self.kernel = self.add_weight(shape=(h, d), initializer="zeros", name="kernel")
            self.bias = self.add_weight(shape=(h,), initializer="zeros", name="bias")

        def call(self, x):
            return k.ops.sum(x * self.kernel, axis=-1) + self.bias

    return PerLeadDense


def lstm_network(window: int, horizon: int, n_features: int, s: Any):
    """The `lstm` network: (training model, forecasting model). The forecast for lead h is a linear
    map of that position's seasonal inputs plus one of the LSTM's state there. With s.ensemble = K > 1
    the network holds K independent LSTM branches trained side by side (one loss each) and forecasts
    with their average."""
    k = keras()
    W, H = window, horizon
    inp = k.Input(shape=(W + H, n_features), name="window")
    ahead_inputs = k.layers.Cropping1D((W, 0), name="ahead_inputs")(inp)  # (H, F): seasonal lags, calendar
    outs = []
    Dense = per_lead_dense_class()
    linear = Dense(name="seasonal_linear", trainable=not s.freeze_linear)(ahead_inputs)  # (H,)
    for b in range(max(1, s.ensemble)):
        tag = "" if s.ensemble <= 1 else f"_{b}"
        reg = k.regularizers.L2(s.l2) if s.l2 > 0 else None
        seq = k.layers.LSTM(s.units, return_sequences=True, kernel_regularizer=reg, name=f"lstm{tag}")(inp)
        ahead_state = k.layers.Cropping1D((W, 0), name=f"ahead_state{tag}")(seq)  # (H, units)
        correction = Dense(name=f"correction{tag}")(ahead_state)  # (H,): one linear map per lead
        outs.append(k.layers.Add(name=f"forecast{tag}")([linear, correction]))
    if len(outs) == 1:
        model = k.Model(inp, outs[0], name="lstm_forecaster")
        return model, model
    train = k.Model(inp, outs, name="lstm_ensemble_branches")
    mean = k.layers.Average(name="forecast")(outs)
    return train, k.Model(inp, mean, name="lstm_forecaster")


def lstm_network_numpy(w: dict[str, np.ndarray], X: np.ndarray, window: int, branches: int) -> np.ndarray:
    """`lstm_network`'s forecasting model in NumPy, from its weights by layer (`KerasForecaster._freeze`)."""
    ahead = X[:, window:, :]
    linear = np.sum(ahead * w["seasonal_linear/0"], axis=-1) + w["seasonal_linear/1"]
    outs = []
    for b in range(branches):
        tag = "" if branches == 1 else f"_{b}"
        seq = lstm_sequence(X, w[f"lstm{tag}/0"], w[f"lstm{tag}/1"], w[f"lstm{tag}/2"])[:, window:, :]
        outs.append(linear + np.sum(seq * w[f"correction{tag}/0"], axis=-1) + w[f"correction{tag}/1"])
    return np.mean(outs, axis=0)


def thesis_network(units: int, horizon: int):
    """The thesis's network: one LSTM layer over the last difference, a Dense(H) output."""
    k = keras()
    inp = k.Input(shape=(1, 1), name="last_difference")
    x = k.layers.LSTM(units, name="lstm")(inp)
    out = k.layers.Dense(horizon, name="next_differences")(x)
    return k.Model(inp, out, name="lstm_thesis")


def thesis_network_numpy(w: dict[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """`thesis_network` in NumPy, from its weights by layer."""
    h = lstm_sequence(X, w["lstm/0"], w["lstm/1"], w["lstm/2"])[:, -1, :]
    return np.einsum("nu,uh->nh", h, w["next_differences/0"]) + w["next_differences/1"]


def lstm_sequence(X: np.ndarray, kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """A Keras LSTM layer (tanh, sigmoid gates in the order i, f, c, o) over (N, T, F): (N, T, units).

    Products go through einsum, not BLAS: for matrices this small a multithreaded BLAS spends its time
    synchronising threads, and on a busy 2-core machine that made a forecast 30x slower.
    """
    n, t_len, _ = X.shape
    units = recurrent.shape[0]
    h = np.zeros((n, units))
    c = np.zeros((n, units))
    out = np.empty((n, t_len, units))
    xz = np.einsum("ntf,fk->ntk", X, kernel) + bias  # (N, T, 4 units)
    for t in range(t_len):
        z = xz[:, t] + np.einsum("nu,uk->nk", h, recurrent)
        i = 1.0 / (1.0 + np.exp(-z[:, :units]))
        f = 1.0 / (1.0 + np.exp(-z[:, units : 2 * units]))
        g = np.tanh(z[:, 2 * units : 3 * units])
        o = 1.0 / (1.0 + np.exp(-z[:, 3 * units :]))
        c = f * c + i * g
        h = o * np.tanh(c)
        out[:, t] = h
    return out


class KerasForecaster(LearnedForecaster):
    """What both LSTMs share: their identity, training setup, forecasting from frozen weights, save/load.

    Subclasses give `_forward` (the network in NumPy) and `_state`/`_set_state` (their scaling)."""

    model: Any = None  # the Keras model while it trains (or when loaded with keras_engine)
    weights_: dict[str, np.ndarray] | None = None  # the trained weights by layer, once training is over

    def spec(self) -> dict:
        return {
            "forecaster": self.name,
            "horizon": self.horizon,
            "quantiles": list(self.quantiles),
            "period": self.period,
            "interval_s": self.interval_s,
            "t0": None if self.t0 is None else str(self.t0),
            "settings": self.settings.to_dict(),
        }

    def save(self, folder: str | Path, task: str, extra: dict | None = None) -> Path:
        """Writes <task>.keras (the Keras model), <task>.json (settings, scaling, quantiles, training
        facts) and <task>.npz (the same weights by layer, for forecasting without TensorFlow)."""
        if self.model is None:
            raise ValueError("fit the forecaster before saving it")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        keras_path = folder / f"{task}.keras"
        k = keras()
        per_lead_dense_class()
        plain = k.Model.from_config(self.model.get_config())  # the forecasting graph alone, no optimizer state
        plain.set_weights(self.model.get_weights())
        plain.save(keras_path)
        arrays: dict[str, Any] = {k: v.astype(np.float32) for k, v in self._weights().items()}  # as trained
        np.savez(folder / f"{task}.npz", **arrays)
        meta = {
            **self.spec(),
            "state": {**self._state(), "fit_length": self.fit_length_},
            "error_quantiles": self.error_quantiles_.tolist(),
            "info": self.info,
            **(extra or {}),
        }
        (folder / f"{task}.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        return keras_path

    @classmethod
    def load(cls, folder: str | Path, task: str, expect: dict | None = None, keras_engine: bool = False) -> Self:
        """Load a saved model; with `expect` (a spec()), refuse one whose settings differ.

        Forecasts run in NumPy from <task>.npz when it is there (no TensorFlow import: a `predict`
        takes seconds, not the ten it takes to start TensorFlow); keras_engine=True (or no .npz) loads
        the .keras file instead.
        """
        folder = Path(folder)
        meta_path, keras_path = folder / f"{task}.json", folder / f"{task}.keras"
        if not meta_path.is_file() or not keras_path.is_file():
            raise InputError(f"no saved model for task '{task}' (expected {task}.keras and {task}.json)", path=folder)
        meta = json.loads(meta_path.read_text())
        if meta.get("forecaster") != cls.name:
            raise InputError(
                f"the saved model for task '{task}' is a {meta.get('forecaster')!r} model, not {cls.name!r}",
                path=meta_path,
            )
        if expect is not None:
            diffs = spec_differences(expect, meta)
            if diffs:
                raise InputError(
                    f"the saved model for task '{task}' was trained with other settings ({'; '.join(diffs)}); "
                    "retrain it with `bsp-planner forecast train`",
                    path=meta_path,
                )
        f = cls(
            horizon=meta["horizon"],
            quantiles=tuple(meta["quantiles"]),
            period=meta["period"],
            interval_s=meta["interval_s"],
            t0=None if meta["t0"] is None else np.datetime64(meta["t0"], "s"),
            settings=cls.settings_type.from_dict(meta["settings"]),
        )
        npz = folder / f"{task}.npz"
        if npz.is_file() and not keras_engine:
            with np.load(npz) as z:
                f.weights_ = {name: z[name].astype(np.float64) for name in z.files}
        else:
            per_lead_dense_class()  # registered before loading
            f.model = keras().models.load_model(keras_path, compile=False)
            f._freeze()
        f._set_state(meta["state"])
        f.fit_length_ = int(meta["state"]["fit_length"])
        f.error_quantiles_ = np.array(meta["error_quantiles"], dtype=np.float64)
        f.info = meta.get("info", {})
        return f

    def _state(self) -> dict:
        raise NotImplementedError

    def _set_state(self, state: dict) -> None:
        raise NotImplementedError

    def _compile(self, model, learning_rate: float) -> None:
        model.compile(optimizer=keras().optimizers.Adam(learning_rate=learning_rate), loss="mse")

    def _predict(self, X: np.ndarray) -> np.ndarray:
        """The network's output for a batch: NumPy from the frozen weights once training is over,
        TensorFlow (one compiled graph call per 2048 rows) while it runs."""
        if self.weights_ is not None:
            return self._forward(np.asarray(X, dtype=np.float64))
        fn = getattr(self, "_infer", None)
        if fn is None or getattr(self, "_infer_model", None) is not self.model:
            import tensorflow as tf

            spec = tf.TensorSpec([None, *X.shape[1:]], tf.float32)
            model = self.model
            fn = tf.function(lambda x: model(x, training=False), input_signature=[spec])
            self._infer, self._infer_model = fn, self.model
        out = [np.asarray(fn(X[i : i + 2048].astype(np.float32))) for i in range(0, len(X), 2048)]
        return np.concatenate(out, axis=0).astype(np.float64).reshape(len(X), -1)

    def _weights(self) -> dict[str, np.ndarray]:
        if self.weights_ is None:
            raise ValueError(f"{self.name}: fit or load the forecaster first")
        return self.weights_

    def _freeze(self) -> None:
        """Copy the trained weights out of Keras, by layer name; forecasts use them from now on."""
        self.weights_ = {}
        for layer in self.model.layers:
            for i, w in enumerate(layer.get_weights()):
                self.weights_[f"{layer.name}/{i}"] = np.asarray(w, dtype=np.float64)

    def _forward(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError
