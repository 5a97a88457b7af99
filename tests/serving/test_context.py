"""The per-query context's computed-once values."""

import threading

from serving.context import computed_once


class Search:
    def __init__(self, barrier: threading.Barrier):
        self.barrier = barrier
        self.computations = 0

    @computed_once
    def vector(self) -> int:
        """Waits for the other search's computation to start too."""
        self.computations += 1
        self.barrier.wait()
        return id(self)


def test_a_value_is_computed_once_per_instance():
    search = Search(threading.Barrier(1))

    assert search.vector == id(search)
    assert search.vector == id(search)
    assert search.computations == 1
    assert Search.vector.__doc__ == "Waits for the other search's computation to start too."


def test_two_searches_compute_at_the_same_time():
    # functools.cached_property on Python 3.11 holds one lock per property for all
    # instances: the second search would wait for the first, and the barrier would break.
    barrier = threading.Barrier(2, timeout=10)
    searches = [Search(barrier), Search(barrier)]
    values: list[int] = []
    threads = [threading.Thread(target=lambda s=s: values.append(s.vector)) for s in searches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(values) == sorted(id(search) for search in searches)
