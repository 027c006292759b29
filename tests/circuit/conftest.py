"""The circuit compiler is work in progress (issue 3): its tests are not yet all passing
and take minutes on 2 cores, so they run only on request: `uv run pytest -m circuit_wip`."""

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/circuit/" in str(item.path):
            item.add_marker(pytest.mark.circuit_wip)
