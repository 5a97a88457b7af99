"""One Prefect test harness for the whole session: a temporary API and database.

Starting it costs ~20 s, so every flow test shares it (Prefect's testing guide). The
startup limit is generous because a loaded 2-core machine has taken over 30 s.
"""

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def prefect_harness() -> Iterator[None]:
    # Imported here, not at the top: every pytest-xdist worker imports this file to
    # collect the suite, and Prefect's server takes about 5 s to import, while only the
    # worker that runs this folder (tests/conftest.py's scheduler) starts the harness.
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield
