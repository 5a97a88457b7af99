"""One Prefect test harness for the whole session: a temporary API and database.

Starting it costs ~20 s, so every flow test shares it (Prefect's testing guide). The
startup limit is generous because a loaded 2-core machine has taken over 30 s.
"""

from collections.abc import Iterator

import pytest
from prefect.testing.utilities import prefect_test_harness


@pytest.fixture(autouse=True, scope="session")
def prefect_harness() -> Iterator[None]:
    with prefect_test_harness(server_startup_timeout=180):
        yield
