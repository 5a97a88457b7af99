"""slackquery.artifacts.validate: the one line a refused build or publish prints."""

from typing import Any

from slackquery.artifacts.validate import failure_summary


def _failure(**fields: Any) -> dict[str, Any]:
    return {"suite": "channels", "expectation": "between", "description": "adds up", **fields}


def test_a_range_refusal_says_what_was_found_and_what_was_expected() -> None:
    found = _failure(found=[77.0], expected=[59.0, 59.0], sample=["W:C1"])
    floor = _failure(found=[1972], expected=[1973, None], sample=[])
    assert failure_summary({"failures": [found, floor]}) == (
        "validation failed: channels: between (adds up): found 77, expected 59, sample: W:C1; "
        "channels: between (adds up): found 1,972, expected at least 1,973"
    )


def test_a_range_refusal_without_values_or_bounds_says_no_more_than_it_knows() -> None:
    # GX reports no values where the expectation raised (a missing column): it printed
    # "found , expected 59", and a missing parameter "expected at most None".
    raised = _failure(found=[], expected=[59, 59], sample=["column not found"])
    unbounded = _failure(found=[3], expected=[None, None], sample=[])
    assert failure_summary({"failures": [raised, unbounded]}) == (
        "validation failed: channels: between (adds up), sample: column not found; "
        "channels: between (adds up)"
    )
