"""The two LSTM forecasters, in Keras on TensorFlow.

``lstm-thesis`` keeps the thesis's recipe (section 4.2) as a faithful baseline: difference the series,
scale the differences to [-1, 1], learn from supervised pairs whose input is the last difference and
whose output is the next H, with one LSTM layer and a Dense(H) output; forecasts invert the scaling and
the differencing.

``lstm`` (the default) is built to be good on daily-cycle workloads:

* it reads the last ``window`` steps (one daily period by default, capped at ``max_window`` = 48:
  a whole day for the half-hourly taxi and hourly temperature series, four hours of the 5-minute
  art_daily series), followed by H positions for the steps to forecast;
* seasonal information enters at every position: the series' own value one period earlier (and
  ``k`` periods, ``lags``: (1, 7) when a week fits twice in the training half, so the taxi series
  see last week too; for the future positions these are the seasonal-naive forecasts and never reach
  past the origin) and the time of day (and day of week, when the training half spans two weeks or
  more) from the timestamps; so every position sees the same hour of the previous day(s);
* values enter relative to the last observed value (a first difference at the origin), so the network
  learns the change ahead, not the level;
* the forecast for lead h is a seasonal linear part (a per-lead linear map of that position's
  seasonal inputs, started from a ridge fit) plus the LSTM's correction (a per-lead linear map of the
  LSTM's state at that position, started at zero): training starts from a linear seasonal model and
  the LSTM learns what it misses; all H outputs come from one pass (multi-output);
* it trains in mini-batches with Adam and early stopping on a validation tail of the training half
  (the last ``val_fraction`` of the training origins, ``H`` origins apart from the rest so no target
  is shared), keeping the best weights; if no epoch beats the starting point on that tail, the
  starting point is kept (``info["kept_start"]``);
* its quantiles come from its own errors: on the validation tail at first, then from its recent
  errors with adaptively calibrated levels (`base.rolling_error_quantiles`).

Both train seeded (`keras.utils.set_random_seed`) with TensorFlow's deterministic ops on a bounded
thread pool, so a run repeats exactly on the same machine.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from ..core.errors import InputError
from ..inputs.settings import load_settings, setting
from .base import DEFAULT_QUANTILES, ForecasterSettings, LearnedForecaster
from .statistical import MSTLForecaster
from .transforms import MinMaxScaler, difference, seasonal_back, supervised_pairs

SECONDS_PER_DAY = 86_400
SECONDS_PER_WEEK = 7 * SECONDS_PER_DAY
Progress = Callable[[str], None]


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(array, dtype=np.float64)).tobytes()).hexdigest()[:16]


@dataclass(frozen=True)
class LSTMSettings:
    """The `lstm` forecaster's settings; all of them go into a saved model's metadata."""

    window: int = setting(0, ge=0)  # past steps read; 0: one daily period, capped at max_window
    max_window: int = setting(48, ge=1)
    lags: tuple[int, ...] = setting(
        (), ge=1
    )  # seasonal lags in periods; (): (1, 7) if a week fits, else (1, 2) or (1,)
    units: int = setting(32, ge=1)
    epochs: int = setting(250, ge=1)
    batch_size: int = setting(64, ge=1)
    patience: int = setting(20, ge=0)
    learning_rate: float = setting(1e-3, gt=0)
    val_fraction: float = setting(0.2, gt=0, lt=1)
    calendar: bool = True
    level: bool = False  # the last value's level as an input too (not only changes)
    # output layer starts as a blend of the MSTL forecast and last week's value ("statistical", with
    # statistical = true), a ridge fit on the seasonal inputs ("linear") or at zero ("zero")
    init: str = setting("statistical", choices=("statistical", "linear", "zero"))
    l2: float = setting(0.0, ge=0)
    ensemble: int = setting(1, ge=1)  # independent LSTM branches trained side by side, forecasts averaged
    freeze_linear: bool = True  # keep the starting seasonal/statistical part fixed while the LSTM trains
    statistical: bool = True  # the `mstl` forecast (fitted on the training half) as an input ahead
    interval_window: int = setting(
        240, ge=0
    )  # recent forecasts whose errors set the quantiles (0: validation errors only)
    interval_gamma: float = setting(
        0.01, ge=0, lt=1
    )  # adaptive-conformal step for the quantile levels (0: fixed levels)
    seed: int = 0

    @classmethod
    def from_dict(cls, d: dict) -> LSTMSettings:
        """Settings from a table (`--set`, saved metadata): checked by the one settings loader."""
        return load_settings(cls, d, prefix="lstm.")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["lags"] = list(self.lags)
        return d


@dataclass(frozen=True)
class ThesisSettings:
    """The thesis recipe's settings: one LSTM layer over one input (the last difference)."""

    units: int = setting(32, ge=1)
    epochs: int = setting(30, ge=1)
    batch_size: int = setting(32, ge=1)
    learning_rate: float = setting(1e-3, gt=0)
    interval_window: int = setting(240, ge=0)
    interval_gamma: float = setting(0.01, ge=0, lt=1)
    seed: int = 0

    @classmethod
    def from_dict(cls, d: dict) -> ThesisSettings:
        return load_settings(cls, d, prefix="lstm-thesis.")

    def to_dict(self) -> dict:
        return asdict(self)


class _KerasForecaster(LearnedForecaster):
    """What both LSTMs share: settings, the calendar of the series, residual quantiles, save/load."""

    settings_type: ClassVar[type[ForecasterSettings]] = LSTMSettings

    def __init__(
        self,
        horizon: int = 20,
        quantiles: tuple[float, ...] = DEFAULT_QUANTILES,
        period: int = 1,
        *,
        interval_s: int | None = None,
        t0: np.datetime64 | None = None,
        settings=None,
        progress: Progress | None = None,
    ) -> None:
        super().__init__(horizon=horizon, quantiles=quantiles, period=period, settings=settings)
        self.interval_s = interval_s
        self.t0 = None if t0 is None else np.asarray(t0, dtype="datetime64[s]")[()]
        self.progress = progress
        self.model: Any = None  # the Keras model while it trains (or when loaded with keras_engine)
        self.weights_: dict[str, np.ndarray] | None = None
        self.meta: dict = {}

    # -- what identifies a trained model ------------------------------------------------------------
    def spec(self) -> dict:
        """Everything a trained model depends on except the data: compared on load."""
        return {
            "forecaster": self.name,
            "horizon": self.horizon,
            "quantiles": list(self.quantiles),
            "period": self.period,
            "interval_s": self.interval_s,
            "t0": None if self.t0 is None else str(self.t0),
            "settings": self.settings.to_dict(),
        }

    def _say(self, msg: str) -> None:
        if self.progress is not None:
            self.progress(msg)

    def _residual_quantiles(self, errors: np.ndarray) -> np.ndarray:
        q = np.quantile(errors, self.quantiles, axis=0)  # (Q, H)
        q[self.median_index] = 0.0  # the point forecast is the median
        return q

    @property
    def interval_window(self) -> int:  # type: ignore[override]
        return self.settings.interval_window

    @property
    def interval_gamma(self) -> float:  # type: ignore[override]
        return self.settings.interval_gamma

    # -- persistence ---------------------------------------------------------------------------------
    def save(self, folder: str | Path, task: str, extra: dict | None = None) -> Path:
        """Writes <task>.keras (the Keras model), <task>.json (settings, scaling, quantiles, training
        facts) and <task>.npz (the same weights by layer, for forecasting without TensorFlow)."""
        if self.model is None:
            raise ValueError("fit the forecaster before saving it")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        keras_path = folder / f"{task}.keras"
        k = _keras()
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
            k = _keras()
            per_lead_dense_class()  # registered before loading
            f.model = k.models.load_model(keras_path, compile=False)
            f._freeze()
        f._set_state(meta["state"])
        f.fit_length_ = int(meta["state"]["fit_length"])
        f.error_quantiles_ = np.array(meta["error_quantiles"], dtype=np.float64)
        f.info = meta.get("info", {})
        f.meta = meta
        return f

    def _state(self) -> dict:
        raise NotImplementedError

    def _set_state(self, state: dict) -> None:
        raise NotImplementedError

    def _compile(self, model, learning_rate: float) -> None:
        k = _keras()
        model.compile(optimizer=k.optimizers.Adam(learning_rate=learning_rate), loss="mse")

    def _predict(self, X: np.ndarray) -> np.ndarray:
        """The network's output for a batch: NumPy from the frozen weights once training is over,
        TensorFlow (one compiled graph call per 2048 rows) while it runs."""
        if getattr(self, "weights_", None) is not None:
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


def spec_differences(expect: dict, meta: dict) -> list[str]:
    diffs = []
    for key, want in expect.items():
        have = meta.get(key)
        if key == "settings" and isinstance(want, dict) and isinstance(have, dict):
            for sk, sv in want.items():
                if have.get(sk) != sv:
                    diffs.append(f"{sk}: saved {have.get(sk)!r}, requested {sv!r}")
        elif have != want:
            diffs.append(f"{key}: saved {have!r}, requested {want!r}")
    return diffs


def _keras():
    from .keras_setup import keras

    return keras()


_PER_LEAD = None


def per_lead_dense_class():
    """A Keras layer mapping (batch, H, D) to (batch, H) with its own weights for each lead time.

    Registered with Keras's serializer so saved models load without custom_objects.
    """
    global _PER_LEAD
    if _PER_LEAD is not None:
        return _PER_LEAD
    k = _keras()

    @k.saving.register_keras_serializable(package="bsp_planner")
    class PerLeadDense(k.layers.Layer):
        def build(self, input_shape):
            h, d = int(input_shape[1]), int(input_shape[2])
            self.kernel = self.add_weight(shape=(h, d), initializer="zeros", name="kernel")
            self.bias = self.add_weight(shape=(h,), initializer="zeros", name="bias")

        def call(self, x):
            return k.ops.sum(x * self.kernel, axis=-1) + self.bias

    _PER_LEAD = PerLeadDense
    return _PER_LEAD


class LSTMForecaster(_KerasForecaster):
    """The LSTM forecaster (a member of the default `ensemble-fit`); see the module's notes."""

    name = "lstm"
    settings_type: ClassVar[type[ForecasterSettings]] = LSTMSettings
    mstl_: MSTLForecaster | None = None  # the statistical input's model, fitted on first use

    # -- shape of the problem -----------------------------------------------------------------------
    @property
    def window(self) -> int:
        s = self.settings
        return s.window if s.window > 0 else max(self.horizon, min(self.period, s.max_window))

    def resolved_lags(self, n_train: int) -> tuple[int, ...]:
        if self.settings.lags:
            return tuple(self.settings.lags)
        # Keep at least half the training half as origins after the longest lag.
        for lags in ((1, 7), (1, 2), (1,)):
            if self.window + self.period * max(lags) + self.horizon <= n_train // 2:
                return lags
        return (1,)

    def history_needed(self, n_train: int) -> int:
        return self.min_history(self.resolved_lags(n_train))

    def validation_settings(self, n_train: int) -> dict:
        """Settings for a refit on part of a training half of n_train steps (`validation`): the lags
        the whole half resolves to, which the shorter part would otherwise shrink (a week to two
        days), scoring another model than the one used."""
        return {"lags": list(self.resolved_lags(n_train))}

    def min_history(self, lags: tuple[int, ...] | None = None) -> int:
        """Training steps needed: the window, the longest lag, H, and room for a validation tail."""
        first = self._first_origin(lags or (1,))
        return first + self.horizon + max(4 * self.horizon, 2 * self.horizon + 10)

    def _min_origin(self) -> int:
        return self._first_origin(self.lags_)

    def _first_origin(self, lags: tuple[int, ...]) -> int:
        first = self.window + self.period * max(lags)
        if self.settings.statistical:  # the MSTL input needs two days before its first forecast
            first = max(first, 2 * self.period, 2 * self.horizon)
        return first

    def _weekly(self) -> bool:
        return bool(self.settings.calendar and self.interval_s and self.weekly_)

    # -- features ------------------------------------------------------------------------------------
    def _calendar(self, idx: np.ndarray) -> list[np.ndarray]:
        if not self.settings.calendar:
            return []
        if self.interval_s and self.t0 is not None:
            secs = self.t0.astype("datetime64[s]").astype(np.int64) + idx.astype(np.int64) * int(self.interval_s)
            day = (secs % SECONDS_PER_DAY) / SECONDS_PER_DAY
            out = [np.sin(2 * np.pi * day), np.cos(2 * np.pi * day)]
            if self._weekly():
                week = ((secs + 3 * SECONDS_PER_DAY) % SECONDS_PER_WEEK) / SECONDS_PER_WEEK  # epoch was a Thursday
                out += [np.sin(2 * np.pi * week), np.cos(2 * np.pi * week)]
            return out
        phase = (idx % self.period) / self.period
        return [np.sin(2 * np.pi * phase), np.cos(2 * np.pi * phase)]

    def features(self, u: np.ndarray, origins: np.ndarray) -> np.ndarray:
        """(len(origins), window + H, F) network inputs; origin o reads only u[:o]."""
        W, H, P = self.window, self.horizon, self.period
        o = np.asarray(origins, dtype=np.int64)[:, None]
        pos = np.arange(W + H)[None, :]
        tau = o - W + pos  # the step each position stands for
        h = tau - o  # < 0: past, >= 0: the lead time of a future position
        future = h >= 0
        anchor = u[o - 1]  # the last observed value
        past = np.where(future, 0.0, u[np.minimum(tau, o - 1)] - anchor)
        feats = [past, future.astype(np.float64)]
        if self.settings.level:
            feats.append(np.broadcast_to(anchor, tau.shape))
        for k in self.lags_:
            back = np.where(future, seasonal_back(np.maximum(h, 0), P, k), P * k)
            src = tau - back
            feats.append(u[src] - anchor)
        if self.settings.statistical:
            feats.append(self._statistical(u, o[:, 0], tau.shape) - anchor)
        feats += self._calendar(tau)
        return np.stack(feats, axis=-1)

    def _statistical(self, u: np.ndarray, origins: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        """(len(origins), window + H): the MSTL forecasts made at each origin (statistical.py) at the
        future positions, on the u scale; 0 at the past positions. The MSTL model is fitted on the
        training half (the first fit_length_ values of any series given here), again after a load."""
        w = self._from_u(u)
        mstl = self.mstl_
        if mstl is None:
            mstl = self.mstl_ = MSTLForecaster(horizon=self.horizon, period=self.period).fit(
                w[: self.fit_length_], errors=False
            )
        out = np.zeros(shape)
        out[:, self.window :] = self._to_u(mstl._point(w, origins))
        return out

    def targets(self, u: np.ndarray, origins: np.ndarray) -> np.ndarray:
        o = np.asarray(origins, dtype=np.int64)
        return u[o[:, None] + np.arange(self.horizon)[None, :]] - u[o - 1][:, None]

    def _to_u(self, w: np.ndarray) -> np.ndarray:
        return (np.asarray(w, dtype=np.float64) - self.center_) / self.scale_

    def _from_u(self, u: np.ndarray) -> np.ndarray:
        return u * self.scale_ + self.center_

    def _state(self) -> dict:
        return {"center": self.center_, "scale": self.scale_, "lags": list(self.lags_), "weekly": bool(self.weekly_)}

    def _set_state(self, state: dict) -> None:
        self.center_ = float(state["center"])
        self.scale_ = float(state["scale"])
        self.lags_ = tuple(state["lags"])
        self.weekly_ = bool(state["weekly"])

    # -- the model -----------------------------------------------------------------------------------
    def build(self, n_features: int):
        """(training model, forecasting model). With ensemble = K > 1 the network holds K independent
        LSTM branches trained side by side (one loss each) and forecasts with their average."""
        k = _keras()
        W, H = self.window, self.horizon
        s = self.settings
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

    def _linear_init(self, X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ridge fit, per lead time, of the change ahead on the future positions' raw inputs (seasonal
        lags, calendar): the linear seasonal part of the forecast, on which the LSTM learns a
        correction (it starts at zero)."""
        W, H = self.window, self.horizon
        F = X.shape[-1]
        kernel = np.zeros((H, F), dtype=np.float32)
        bias = np.zeros(H, dtype=np.float32)
        if self.settings.init == "statistical" and self.settings.statistical:
            return self._statistical_init(X, Y, kernel, bias)
        if self.settings.init not in ("linear", "statistical"):
            return kernel, bias
        lam = 1e-3 * len(X)
        for h in range(H):
            A = X[:, W + h, :]
            keep = np.nonzero(A.std(axis=0) > 0)[0]  # constant columns (the future flag) go to the bias
            A = A[:, keep]
            mu, ym = A.mean(axis=0), Y[:, h].mean()
            Ac = A - mu
            coef = np.linalg.solve(Ac.T @ Ac + lam * np.eye(len(keep)), Ac.T @ (Y[:, h] - ym))
            kernel[h, keep] = coef
            bias[h] = ym - mu @ coef
        return kernel, bias

    def _statistical_init(self, X, Y, kernel, bias):
        """The forecast starts as a blend, per lead time, of the MSTL forecast and the longest
        seasonal lag (last week's value where the series has a week): weights alpha and 1 - alpha,
        alpha from {0, 0.25, .., 1} by the least squared error on X, Y (the validation tail)."""
        W = self.window
        col_stat = 2 + int(self.settings.level) + len(self.lags_)
        col_lag = 2 + int(self.settings.level) + int(np.argmax(self.lags_))
        alphas = np.linspace(0.0, 1.0, 5)
        self.blend_ = []
        for h in range(self.horizon):
            a, b = X[:, W + h, col_stat], X[:, W + h, col_lag]
            err = [np.mean((al * a + (1 - al) * b - Y[:, h]) ** 2) for al in alphas]
            al = float(alphas[int(np.argmin(err))])
            kernel[h, col_stat], kernel[h, col_lag] = al, 1.0 - al
            self.blend_.append(al)
        return kernel, bias

    def fit(self, history: np.ndarray) -> LSTMForecaster:
        from .keras_setup import seed_everything

        w = np.asarray(history, dtype=np.float64)
        s = self.settings
        self.lags_ = self.resolved_lags(len(w))
        need = self.min_history(self.lags_)
        if len(w) < need:
            raise InputError(
                f"lstm: the training history has {len(w)} steps but needs at least {need} "
                f"(input window {self.window} + seasonal lag {self.period * max(self.lags_)} + H {self.horizon} "
                "+ a validation tail)"
            )
        lo, hi = float(np.min(w)), float(np.max(w))
        if not hi > lo:
            raise InputError("lstm: the training history is constant")
        self.center_, self.scale_ = (hi + lo) / 2.0, (hi - lo) / 2.0
        span_s = len(w) * (self.interval_s or 0)
        self.weekly_ = bool(self.interval_s) and span_s >= 2 * SECONDS_PER_WEEK and self.period > 1
        u = self._to_u(w)
        self.fit_length_ = len(w)
        self.mstl_ = None
        self.blend_ = None
        origins = np.arange(self._min_origin(), len(u) - self.horizon + 1)
        n_val = max(2 * self.horizon, int(round(len(origins) * s.val_fraction)))
        val_o = origins[-n_val:]
        train_o = origins[: len(origins) - n_val - self.horizon + 1]  # no target shared with validation
        X_tr, Y_tr = self.features(u, train_o), self.targets(u, train_o)
        X_va, Y_va = self.features(u, val_o), self.targets(u, val_o)

        seed_everything(s.seed)
        k = _keras()
        trainer, self.model = self.build(X_tr.shape[-1])
        K = max(1, s.ensemble)
        if s.init == "statistical" and s.statistical:  # the blend is chosen on the validation tail
            trainer.get_layer("seasonal_linear").set_weights(list(self._linear_init(X_va, Y_va)))
        else:
            trainer.get_layer("seasonal_linear").set_weights(list(self._linear_init(X_tr, Y_tr)))
        self._compile(trainer, s.learning_rate)
        initial = trainer.get_weights()
        initial_val = float(np.mean((self._predict(X_va) - Y_va) ** 2))
        start = time.perf_counter()
        say = self._say

        def on_epoch_end(epoch: int, logs: dict | None = None) -> None:
            logs = logs or {}
            if (epoch + 1) % 10 == 0:
                say(
                    f"epoch {epoch + 1}: loss {logs.get('loss', float('nan')):.4f}, val "
                    f"{logs.get('val_loss', float('nan')):.4f}"
                )

        stop = k.callbacks.EarlyStopping(monitor="val_loss", patience=s.patience, restore_best_weights=True)
        ys = (lambda y: y.astype(np.float32)) if K == 1 else (lambda y: [y.astype(np.float32)] * K)
        hist = trainer.fit(
            X_tr.astype(np.float32),
            ys(Y_tr),
            validation_data=(X_va.astype(np.float32), ys(Y_va)),
            epochs=s.epochs,
            batch_size=s.batch_size,
            shuffle=True,
            verbose=0,
            callbacks=[stop, k.callbacks.LambdaCallback(on_epoch_end=on_epoch_end)],
        )
        val = np.asarray(hist.history["val_loss"]) / K
        kept_start = bool(s.l2 == 0 and initial_val <= val.min())
        if kept_start:
            trainer.set_weights(initial)  # no epoch beat the starting point on the validation tail
        self._freeze()
        point = self._from_u(self._predict(X_va) + u[val_o - 1][:, None])
        truth = w[val_o[:, None] + np.arange(self.horizon)[None, :]]
        self.error_quantiles_ = self._residual_quantiles(truth - point)
        self.fit_length_ = len(w)
        self.info = {
            "epochs_run": int(len(val)),
            "best_epoch": 0 if kept_start else int(np.argmin(val)) + 1,
            "kept_start": kept_start,
            "start_val_mse": initial_val,
            "val_mse": float(val.min()),
            "val_rmse": float(np.sqrt(np.mean((truth - point) ** 2))),
            "train_origins": int(len(train_o)),
            "val_origins": int(len(val_o)),
            "lags": list(self.lags_),
            "statistical_blend": getattr(self, "blend_", None),
            "window": self.window,
            "train_seconds": round(time.perf_counter() - start, 2),
            "history_digest": _digest(w),
        }
        return self

    def _forward(self, X: np.ndarray) -> np.ndarray:
        W, K, w = self.window, max(1, self.settings.ensemble), self._weights()
        ahead = X[:, W:, :]
        linear = np.sum(ahead * w["seasonal_linear/0"], axis=-1) + w["seasonal_linear/1"]
        outs = []
        for b in range(K):
            tag = "" if K == 1 else f"_{b}"
            seq = lstm_sequence(X, w[f"lstm{tag}/0"], w[f"lstm{tag}/1"], w[f"lstm{tag}/2"])[:, W:, :]
            outs.append(linear + np.sum(seq * w[f"correction{tag}/0"], axis=-1) + w[f"correction{tag}/1"])
        return np.mean(outs, axis=0)

    def _point(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        u = self._to_u(series)
        return self._from_u(self._predict(self.features(u, origins)) + u[origins - 1][:, None])


class ThesisLSTMForecaster(_KerasForecaster):
    """The thesis's recipe: one difference in, H differences out."""

    name = "lstm-thesis"
    settings_type: ClassVar[type[ForecasterSettings]] = ThesisSettings

    def min_history(self, lags: tuple[int, ...] | None = None) -> int:
        return self.horizon + 3

    def _state(self) -> dict:
        return {"diff_lo": self.scaler_.lo, "diff_hi": self.scaler_.hi}

    def _set_state(self, state: dict) -> None:
        self.scaler_ = MinMaxScaler(float(state["diff_lo"]), float(state["diff_hi"]))

    def build(self):
        k = _keras()
        inp = k.Input(shape=(1, 1), name="last_difference")
        x = k.layers.LSTM(self.settings.units, name="lstm")(inp)
        out = k.layers.Dense(self.horizon, name="next_differences")(x)
        return k.Model(inp, out, name="lstm_thesis")

    def fit(self, history: np.ndarray) -> ThesisLSTMForecaster:
        from .keras_setup import seed_everything

        w = np.asarray(history, dtype=np.float64)
        if len(w) < self.min_history():
            raise InputError(
                f"lstm-thesis: the training history has {len(w)} steps but needs at least {self.min_history()}"
            )
        d = difference(w)
        try:
            self.scaler_ = MinMaxScaler.fit(d)
        except ValueError as exc:
            raise InputError("lstm-thesis: the training history is constant") from exc
        sd = self.scaler_.transform(d)
        X, Y, _ = supervised_pairs(sd, 1, self.horizon)
        s = self.settings
        seed_everything(s.seed)
        self.model = self.build()
        self._compile(self.model, s.learning_rate)
        start = time.perf_counter()
        hist = self.model.fit(
            X[:, :, None].astype(np.float32),
            Y.astype(np.float32),
            epochs=s.epochs,
            batch_size=s.batch_size,
            shuffle=True,
            verbose=0,
        )
        self._freeze()
        # Quantiles from its own errors on the training half (it keeps no validation tail).
        origins = np.arange(2, len(w) - self.horizon + 1)
        point = self._point(w, origins)
        truth = w[origins[:, None] + np.arange(self.horizon)[None, :]]
        self.error_quantiles_ = self._residual_quantiles(truth - point)
        self.fit_length_ = len(w)
        self.info = {
            "epochs_run": len(hist.history["loss"]),
            "train_mse": float(hist.history["loss"][-1]),
            "train_seconds": round(time.perf_counter() - start, 2),
            "history_digest": _digest(w),
        }
        return self

    def _forward(self, X: np.ndarray) -> np.ndarray:
        w = self._weights()
        h = lstm_sequence(X, w["lstm/0"], w["lstm/1"], w["lstm/2"])[:, -1, :]
        return np.einsum("nu,uh->nh", h, w["next_differences/0"]) + w["next_differences/1"]

    def _point(self, w: np.ndarray, origins: np.ndarray) -> np.ndarray:
        last_diff = w[origins - 1] - w[origins - 2]
        x = self.scaler_.transform(last_diff)[:, None, None]
        diffs = self.scaler_.inverse(self._predict(x))
        return w[origins - 1][:, None] + np.cumsum(diffs, axis=1)

    def _min_origin(self) -> int:
        return 2
