"""A live run takes the CFS period its profile was measured at, and warns when told another one."""

import json
from types import SimpleNamespace

from bsp_planner.inputs.profiles import metadata_path
from bsp_planner.profiling.cgroups import CFS_PERIOD_US
from bsp_planner.runtime.run_inputs import period_mismatch, profile_period_us


def _exp(tmp_path, meta: dict | None):
    profile = tmp_path / "profile.csv"
    profile.write_text("task,cpu_millicores,workload,duration_s\n")
    if meta is not None:
        metadata_path(profile).write_text(json.dumps(meta))
    return SimpleNamespace(profile_path=profile)


def test_a_run_at_another_period_than_its_profile_is_warned_naming_both(tmp_path):
    exp = _exp(tmp_path, {"backend": "local-cgroup", "cfs_period_us": 10000})
    note = period_mismatch(exp, CFS_PERIOD_US)
    assert note is not None and "10000 us" in note and f"{CFS_PERIOD_US} us" in note and "--cfs-period-us 10000" in note
    assert period_mismatch(exp, 10000) is None


def test_profiles_from_before_the_setting_count_as_the_default_period(tmp_path):
    exp = _exp(tmp_path, {"backend": "local-cgroup"})
    assert period_mismatch(exp, CFS_PERIOD_US) is None
    assert period_mismatch(exp, 10000) is not None


def test_no_warning_where_the_profile_does_not_say(tmp_path):
    assert period_mismatch(_exp(tmp_path, None), 10000) is None
    assert period_mismatch(_exp(tmp_path, {"backend": "kubernetes"}), 10000) is None


def test_a_run_takes_the_period_its_profile_was_measured_at(tmp_path):
    assert profile_period_us(_exp(tmp_path, {"backend": "local-cgroup", "cfs_period_us": 10000})) == 10000
    assert profile_period_us(_exp(tmp_path, {"backend": "local-cgroup"})) == CFS_PERIOD_US
    assert profile_period_us(_exp(tmp_path, {"backend": "kubernetes"})) is None
    assert profile_period_us(_exp(tmp_path, None)) is None


def test_a_profile_whose_recorded_period_is_not_one_is_refused_naming_its_file(tmp_path):
    import pytest

    from bsp_planner.core.errors import InputError

    for bad in ("abc", 0, 1.5e12, None):
        with pytest.raises(InputError) as e:
            profile_period_us(_exp(tmp_path, {"backend": "local-cgroup", "cfs_period_us": bad}))
        assert e.value.field == "cfs_period_us" and str(e.value.path).endswith("profile.meta.json")
