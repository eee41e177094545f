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
thread pool, so a run repeats exactly on the same machine. Their data (windows, scaling) is in
lstm_data.py, their networks and what they share (save, load, forecasting in NumPy) in keras_model.py.
"""

from __future__ import annotations

import time
from typing import ClassVar

import numpy as np

from ..core.errors import InputError
from .base import ForecasterSettings, ahead, digest
from .keras_model import KerasForecaster, keras, lstm_network, lstm_network_numpy, thesis_network, thesis_network_numpy
from .lstm_data import LSTMSettings, LSTMWindows, ThesisSettings
from .transforms import MinMaxScaler, difference, supervised_pairs


class LSTMForecaster(LSTMWindows, KerasForecaster):
    """The LSTM forecaster (a member of the default `ensemble-fit`); see the module's notes."""

    name = "lstm"
    settings_type: ClassVar[type[ForecasterSettings]] = LSTMSettings
    blend_: list[float] | None = None  # the statistical start's blend weight per lead, when it has one

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
        w = np.asarray(history, dtype=np.float64)
        s = self.settings
        u = self._scaled_history(w)
        self.blend_ = None
        train_o, val_o = self._split_origins(len(u))
        X_tr, Y_tr = self.features(u, train_o), self.targets(u, train_o)
        X_va, Y_va = self.features(u, val_o), self.targets(u, val_o)

        k = keras()
        k.utils.set_random_seed(int(s.seed))
        trainer, self.model = lstm_network(self.window, self.horizon, X_tr.shape[-1], s)
        K = max(1, s.ensemble)
        # the statistical blend is chosen on the validation tail, a ridge fit on the training origins
        start_on = (X_va, Y_va) if s.init == "statistical" and s.statistical else (X_tr, Y_tr)
        trainer.get_layer("seasonal_linear").set_weights(list(self._linear_init(*start_on)))
        self._compile(trainer, s.learning_rate)
        initial = trainer.get_weights()
        initial_val = float(np.mean((self._predict(X_va) - Y_va) ** 2))
        start = time.perf_counter()

        def on_epoch_end(epoch: int, logs: dict | None = None) -> None:
            logs = logs or {}
            if (epoch + 1) % 10 == 0:
                self._say(
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
        truth = ahead(w, val_o, self.horizon)
        self._fit_interval(truth - point)
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
            "history_digest": digest(w),
        }
        return self

    def _forward(self, X: np.ndarray) -> np.ndarray:
        return lstm_network_numpy(self._weights(), X, self.window, max(1, self.settings.ensemble))

    def _point(self, series: np.ndarray, origins: np.ndarray) -> np.ndarray:
        u = self._to_u(series)
        return self._from_u(self._predict(self.features(u, origins)) + u[origins - 1][:, None])


class ThesisLSTMForecaster(KerasForecaster):
    """The thesis's recipe: one difference in, H differences out."""

    name = "lstm-thesis"
    settings_type: ClassVar[type[ForecasterSettings]] = ThesisSettings

    def min_history(self, lags: tuple[int, ...] | None = None) -> int:
        return self.horizon + 3

    def _state(self) -> dict:
        return {"diff_lo": self.scaler_.lo, "diff_hi": self.scaler_.hi}

    def _set_state(self, state: dict) -> None:
        self.scaler_ = MinMaxScaler(float(state["diff_lo"]), float(state["diff_hi"]))

    def fit(self, history: np.ndarray) -> ThesisLSTMForecaster:
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
        keras().utils.set_random_seed(int(s.seed))
        self.model = thesis_network(s.units, self.horizon)
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
        self._fit_interval(ahead(w, origins, self.horizon) - self._point(w, origins))
        self.fit_length_ = len(w)
        self.info = {
            "epochs_run": len(hist.history["loss"]),
            "train_mse": float(hist.history["loss"][-1]),
            "train_seconds": round(time.perf_counter() - start, 2),
            "history_digest": digest(w),
        }
        return self

    def _forward(self, X: np.ndarray) -> np.ndarray:
        return thesis_network_numpy(self._weights(), X)

    def _point(self, w: np.ndarray, origins: np.ndarray) -> np.ndarray:
        last_diff = w[origins - 1] - w[origins - 2]
        x = self.scaler_.transform(last_diff)[:, None, None]
        diffs = self.scaler_.inverse(self._predict(x))
        return w[origins - 1][:, None] + np.cumsum(diffs, axis=1)

    def _min_origin(self) -> int:
        return 2
