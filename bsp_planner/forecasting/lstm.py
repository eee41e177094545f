"""The two LSTM forecasters, in Keras on TensorFlow.

``lstm-thesis`` keeps the thesis's recipe (section 4.2) as a faithful baseline: difference the series,
scale the differences to [-1, 1], learn from supervised pairs whose input is the last difference and
whose output is the next H, with one LSTM layer and a Dense(H) output; forecasts invert the scaling and
the differencing.

``lstm`` (the default) is built to be good on daily-cycle workloads:

* it reads a window of the last ``window`` steps (one daily period by default, capped at
  ``max_window``), followed by H positions for the steps to forecast;
* seasonal information enters as inputs at every position: the series' own values one and ``k``
  periods earlier (``lags``, in days; for the future positions these are the seasonal-naive forecasts
  and never reach past the origin) and the time of day (and day of week, when the training half spans
  two weeks or more) from the timestamps;
* values enter relative to the last observed value (a first difference at the origin), so the network
  learns the change ahead, not the level;
* the output layer sees both the LSTM's state and the raw inputs at each future position, so the
  seasonal-naive and persistence forecasts are one linear layer away and the LSTM learns the
  correction on top of them; all H outputs come from one pass (multi-output);
* it trains in mini-batches with Adam and early stopping on a validation tail of the training half
  (the last ``val_fraction`` of the training origins, ``H`` origins apart from the rest so no target
  is shared), keeping the best weights;
* its quantiles are the empirical quantiles of its errors on that validation tail, per lead time.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import InputError
from .base import DEFAULT_QUANTILES, Forecaster
from .transforms import MinMaxScaler, difference, seasonal_back, supervised_pairs

SECONDS_PER_DAY = 86_400
SECONDS_PER_WEEK = 7 * SECONDS_PER_DAY
Progress = Callable[[str], None]


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(array, dtype=np.float64)).tobytes()).hexdigest()[:16]


@dataclass(frozen=True)
class LSTMSettings:
    """The `lstm` forecaster's settings; all of them go into a saved model's metadata."""

    window: int = 0  # past steps read; 0: one daily period, capped at max_window
    max_window: int = 96
    lags: tuple[int, ...] = ()  # seasonal lags in periods; (): (1, 7) if a week fits, else (1, 2) or (1,)
    units: int = 32
    epochs: int = 120
    batch_size: int = 64
    patience: int = 12
    learning_rate: float = 3e-3
    val_fraction: float = 0.2
    calendar: bool = True
    seed: int = 0

    @classmethod
    def from_dict(cls, d: dict) -> LSTMSettings:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise InputError(f"unknown lstm setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}", field="settings")
        d = dict(d)
        if "lags" in d:
            d["lags"] = tuple(int(x) for x in d["lags"])
        return cls(**d)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["lags"] = list(self.lags)
        return d


@dataclass(frozen=True)
class ThesisSettings:
    """The thesis recipe's settings: one LSTM layer over one input (the last difference)."""

    units: int = 32
    epochs: int = 30
    batch_size: int = 32
    learning_rate: float = 1e-3
    seed: int = 0

    @classmethod
    def from_dict(cls, d: dict) -> ThesisSettings:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise InputError(
                f"unknown lstm-thesis setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}", field="settings"
            )
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)


class _KerasForecaster(Forecaster):
    """What both LSTMs share: settings, the calendar of the series, residual quantiles, save/load."""

    settings_type: type = LSTMSettings

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
        super().__init__(horizon=horizon, quantiles=quantiles, period=period)
        self.settings = settings if settings is not None else self.settings_type()
        self.interval_s = interval_s
        self.t0 = None if t0 is None else np.datetime64(t0, "s")
        self.progress = progress
        self.model = None
        self.info: dict = {}

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

    def _with_quantiles(self, point: np.ndarray) -> np.ndarray:
        return np.sort(point[None, :, :] + self.error_quantiles_[:, None, :], axis=0)

    # -- persistence ---------------------------------------------------------------------------------
    def save(self, folder: str | Path, task: str, extra: dict | None = None) -> Path:
        """Writes <task>.keras and <task>.json (settings, scaling, quantiles, training facts)."""
        if self.model is None:
            raise ValueError("fit the forecaster before saving it")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        keras_path = folder / f"{task}.keras"
        self.model.save(keras_path)
        meta = {
            **self.spec(),
            "state": self._state(),
            "error_quantiles": self.error_quantiles_.tolist(),
            "info": self.info,
            **(extra or {}),
        }
        (folder / f"{task}.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        return keras_path

    @classmethod
    def load(cls, folder: str | Path, task: str, expect: dict | None = None) -> "_KerasForecaster":
        """Load a saved model; with `expect` (a spec()), refuse one whose settings differ."""
        folder = Path(folder)
        meta_path, keras_path = folder / f"{task}.json", folder / f"{task}.keras"
        if not meta_path.is_file() or not keras_path.is_file():
            raise InputError(f"no saved model for task '{task}' (expected {task}.keras and {task}.json)", path=folder)
        meta = json.loads(meta_path.read_text())
        if meta.get("forecaster") != cls.name:
            raise InputError(
                f"the saved model for task '{task}' is a {meta.get('forecaster')!r} model, not {cls.name!r}", path=meta_path
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
        k = _keras()
        f.model = k.models.load_model(keras_path, compile=False)
        f._set_state(meta["state"])
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
        """The model's output for a batch, in one graph call per 1024 rows (no Keras fit/predict loop)."""
        out = []
        for i in range(0, len(X), 1024):
            out.append(np.asarray(self.model(X[i : i + 1024].astype(np.float32), training=False)))
        return np.concatenate(out, axis=0).astype(np.float64).reshape(len(X), -1)


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


class LSTMForecaster(_KerasForecaster):
    """The default forecaster; see the module's notes."""

    name = "lstm"
    settings_type = LSTMSettings

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

    def min_history(self, lags: tuple[int, ...] | None = None) -> int:
        """Training steps needed: the window, the longest lag, H, and room for a validation tail."""
        lags = lags or (1,)
        first = self.window + self.period * max(lags)
        return first + self.horizon + max(4 * self.horizon, 2 * self.horizon + 10)

    def _min_origin(self) -> int:
        return self.window + self.period * max(self.lags_)

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
        feats = [past, future.astype(np.float64), np.broadcast_to(anchor, tau.shape)]
        for k in self.lags_:
            back = np.where(future, seasonal_back(np.maximum(h, 0), P, k), P * k)
            src = tau - back
            feats.append(u[src] - anchor)
        feats += self._calendar(tau)
        return np.stack(feats, axis=-1)

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
        k = _keras()
        W, H = self.window, self.horizon
        inp = k.Input(shape=(W + H, n_features), name="window")
        seq = k.layers.LSTM(self.settings.units, return_sequences=True, name="lstm")(inp)
        both = k.layers.Concatenate(name="state_and_inputs")([seq, inp])
        step = k.layers.Dense(1, name="change")(both)  # (W + H, 1)
        ahead = k.layers.Cropping1D((W, 0), name="ahead")(step)  # the H future positions
        out = k.layers.Flatten(name="forecast")(ahead)
        return k.Model(inp, out, name="lstm_forecaster")

    def fit(self, history: np.ndarray) -> "LSTMForecaster":
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
        origins = np.arange(self._min_origin(), len(u) - self.horizon + 1)
        n_val = max(2 * self.horizon, int(round(len(origins) * s.val_fraction)))
        val_o = origins[-n_val:]
        train_o = origins[: len(origins) - n_val - self.horizon + 1]  # no target shared with validation
        X_tr, Y_tr = self.features(u, train_o), self.targets(u, train_o)
        X_va, Y_va = self.features(u, val_o), self.targets(u, val_o)

        seed_everything(s.seed)
        k = _keras()
        self.model = self.build(X_tr.shape[-1])
        self._compile(self.model, s.learning_rate)
        start = time.perf_counter()
        say = self._say

        class _Progress(k.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                logs = logs or {}
                if (epoch + 1) % 10 == 0:
                    say(f"epoch {epoch + 1}: loss {logs.get('loss', float('nan')):.4f}, val {logs.get('val_loss', float('nan')):.4f}")

        stop = k.callbacks.EarlyStopping(monitor="val_loss", patience=s.patience, restore_best_weights=True)
        hist = self.model.fit(
            X_tr.astype(np.float32),
            Y_tr.astype(np.float32),
            validation_data=(X_va.astype(np.float32), Y_va.astype(np.float32)),
            epochs=s.epochs,
            batch_size=s.batch_size,
            shuffle=True,
            verbose=0,
            callbacks=[stop, _Progress()],
        )
        val = np.asarray(hist.history["val_loss"])
        point = self._from_u(self._predict(X_va) + u[val_o - 1][:, None])
        truth = w[val_o[:, None] + np.arange(self.horizon)[None, :]]
        self.error_quantiles_ = self._residual_quantiles(truth - point)
        self.info = {
            "epochs_run": int(len(val)),
            "best_epoch": int(np.argmin(val)) + 1,
            "val_mse": float(val.min()),
            "val_rmse": float(np.sqrt(np.mean((truth - point) ** 2))),
            "train_origins": int(len(train_o)),
            "val_origins": int(len(val_o)),
            "lags": list(self.lags_),
            "window": self.window,
            "train_seconds": round(time.perf_counter() - start, 2),
            "history_digest": _digest(w),
        }
        return self

    def predict_origins(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        if self.model is None:
            raise ValueError("fit the forecaster first")
        series = np.asarray(series, dtype=np.float64)
        origins = np.asarray(origins, dtype=np.int64)
        if np.any(origins < self._min_origin()):
            raise ValueError(f"{self.name}: needs at least {self._min_origin()} past values before a forecast")
        u = self._to_u(series)
        X = self.features(u, origins)
        point = self._from_u(self._predict(X) + u[origins - 1][:, None])
        return self._with_quantiles(point)


class ThesisLSTMForecaster(_KerasForecaster):
    """The thesis's recipe: one difference in, H differences out."""

    name = "lstm-thesis"
    settings_type = ThesisSettings

    def min_history(self, lags=None) -> int:
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

    def fit(self, history: np.ndarray) -> "ThesisLSTMForecaster":
        from .keras_setup import seed_everything

        w = np.asarray(history, dtype=np.float64)
        if len(w) < self.min_history():
            raise InputError(f"lstm-thesis: the training history has {len(w)} steps but needs at least {self.min_history()}")
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
            X[:, :, None].astype(np.float32), Y.astype(np.float32), epochs=s.epochs, batch_size=s.batch_size, shuffle=True, verbose=0
        )
        # Quantiles from its own errors on the training half (it keeps no validation tail).
        origins = np.arange(2, len(w) - self.horizon + 1)
        point = self._point(w, origins)
        truth = w[origins[:, None] + np.arange(self.horizon)[None, :]]
        self.error_quantiles_ = self._residual_quantiles(truth - point)
        self.info = {
            "epochs_run": len(hist.history["loss"]),
            "train_mse": float(hist.history["loss"][-1]),
            "train_seconds": round(time.perf_counter() - start, 2),
            "history_digest": _digest(w),
        }
        return self

    def _point(self, w: np.ndarray, origins: np.ndarray) -> np.ndarray:
        last_diff = w[origins - 1] - w[origins - 2]
        x = self.scaler_.transform(last_diff)[:, None, None]
        diffs = self.scaler_.inverse(self._predict(x))
        return w[origins - 1][:, None] + np.cumsum(diffs, axis=1)

    def predict_origins(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        if self.model is None:
            raise ValueError("fit the forecaster first")
        series = np.asarray(series, dtype=np.float64)
        origins = np.asarray(origins, dtype=np.int64)
        if np.any(origins < 2):
            raise ValueError(f"{self.name}: needs at least 2 past values before a forecast")
        return self._with_quantiles(self._point(series, origins))


LSTMS = {c.name: c for c in (LSTMForecaster, ThesisLSTMForecaster)}
