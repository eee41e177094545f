"""A live run's watchers (metrics, events, a job resource's status) see what the run log sees and never stop it."""

from bsp_planner.runtime.watchers import Watchers


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def run_started(self, run_id, tasks, steps):
        self.calls.append(("started", run_id, tuple(tasks), steps))

    def step_logged(self, rec):
        self.calls.append(("step", rec["step"]))

    def noticed(self, kind, message, **counts):
        self.calls.append(("noticed", kind, counts))

    def run_ended(self, status, message, summary):
        self.calls.append(("ended", status))


class Broken(Recorder):
    def step_logged(self, rec):
        raise RuntimeError("scrape endpoint gone")


def test_every_watcher_hears_the_run_in_order_and_a_failing_one_is_dropped_with_one_line():
    said: list[str] = []
    good, broken = Recorder(), Broken()
    w = Watchers([broken, good], said.append)
    w.run_started("r1", ["a", "b"], 3)
    for t in range(3):
        w.step_logged({"step": t})
    w.noticed("deferred", "node-a has no room now", tasks=2)
    w.run_ended("finished", "", {})
    assert good.calls == [
        ("started", "r1", ("a", "b"), 3),
        ("step", 0),
        ("step", 1),
        ("step", 2),
        ("noticed", "deferred", {"tasks": 2}),
        ("ended", "finished"),
    ]
    assert broken.calls == [("started", "r1", ("a", "b"), 3)]  # dropped at its first error, not called again
    assert said == ["Broken stopped: RuntimeError: scrape endpoint gone"]
