"""Lines tests add to the terminal summary (shown by `pytest -q` too, unlike
print without -s): the fuzzer's counts appear in the CI log."""
import pytest


def pytest_configure(config):
    config._kiln_summary = []


@pytest.fixture
def summary(request):
    """A list; each string appended is a line of the terminal summary."""
    return request.config._kiln_summary


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = getattr(config, "_kiln_summary", [])
    if lines:
        terminalreporter.write_sep("-", "kiln fuzzing")
        for line in lines:
            terminalreporter.write_line(line)
