"""Fixtures shared by the e2e tests."""
import pytest

from tailweight_e2e.procs import ProcGroup


@pytest.fixture
def group(tmp_path):
    """The test's child processes, stopped by PID when it ends (logs under tmp_path/logs)."""
    with ProcGroup(tmp_path / "logs") as g:
        yield g
