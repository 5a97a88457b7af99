"""The vector-coverage rule against the published artifact, case by case."""

import pytest

from expectations.suites.vector_coverage import keeps_coverage


def _metadata(vectors: int, messages: int, generation: str = "g1") -> dict[str, object]:
    return {
        "build_id": "b",
        "generation_id": generation,
        "vector_count": vectors,
        "message_count": messages,
    }


@pytest.mark.parametrize(
    ("published", "candidate", "kept"),
    [
        (None, _metadata(0, 59), True),  # nothing published yet
        (_metadata(59, 59), _metadata(30, 59, "g2"), True),  # a model switch starts again
        (_metadata(30, 59), _metadata(40, 59), True),  # embedding moved on
        (_metadata(59, 59), _metadata(59, 80), True),  # new messages, no vector lost
        (_metadata(50, 59), _metadata(45, 54), True),  # 5 embedded messages deleted
        (_metadata(59, 59), _metadata(45, 50), False),  # 5 lost beyond the 9 deleted
        (_metadata(59, 59), _metadata(58, 80), False),  # one lost while messages grew
        (_metadata(59, 59), _metadata(36, 59), False),  # vectors lost, same messages
    ],
)
def test_coverage_may_fall_only_for_a_reason(
    published: dict[str, object] | None, candidate: dict[str, object], kept: bool
) -> None:
    assert keeps_coverage(candidate, published) is kept
