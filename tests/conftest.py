import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import write_profile  # noqa: E402


@pytest.fixture
def synthetic_profile(tmp_path):
    return write_profile(tmp_path / "profile" / "profile.csv")
