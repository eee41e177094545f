import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import write_profile

# The live tests' fixtures (a ZooKeeper server, credentials, run reaping) are defined in zk_fixtures.py and
# registered here for every test module, so that no module imports a fixture by the name of its parameter.
pytest_plugins = ["zk_fixtures"]


@pytest.fixture
def synthetic_profile(tmp_path):
    return write_profile(tmp_path / "profile" / "profile.csv")
