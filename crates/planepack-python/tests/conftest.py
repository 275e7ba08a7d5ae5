"""In CI every test runs: torch must be installed there (a test that skips in CI would pass
without testing anything)."""

import importlib.util
import os


def pytest_configure(config):
    if os.environ.get("CI") and importlib.util.find_spec("torch") is None:
        raise RuntimeError("CI is set but torch is not installed: the torch tests would be skipped")
