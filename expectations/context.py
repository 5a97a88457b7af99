"""The ephemeral GX context and the one way suites are run against DataFrame batches.

DuckDB is not a GX SQL backend (a duckdb-engine datasource failed in metric resolution),
so every suite validates pandas batches read from a read-only DuckDB connection. Big
tables arrive in chunks of per-row check columns computed in SQL (a vector becomes its
dimension, finiteness and norm error), so no batch ever holds the vectors themselves.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import great_expectations as gx
import pandas as pd
from great_expectations.core.expectation_validation_result import (
    ExpectationSuiteValidationResult,
)
from great_expectations.data_context.types.base import ProgressBarsConfig

DATASOURCE = "search_artifact"
# One DataFrame asset serves every suite: each batch is handed its frame, and adding an
# asset per suite rewrote the context's YAML each time (an eighth of a validation).
BATCHES = "batches"
SAMPLE_SIZE = 10


def make_context() -> Any:
    """An in-memory context with the pandas datasource and the whole-DataFrame batch
    definition every suite uses; no progress bars."""
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    asset = context.data_sources.add_pandas(DATASOURCE).add_dataframe_asset(BATCHES)
    asset.add_batch_definition_whole_dataframe(BATCHES)
    return context


@dataclass
class SuiteOutcome:
    """The merged outcome of one suite over all the batches (chunks) of its table."""

    suite: str
    batches: int = 0
    evaluated: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def success(self) -> bool:
        """True when every expectation passed on every batch (and there was a batch)."""
        return self.batches > 0 and not self.failures


def _sample(result: dict[str, Any], id_columns: list[str]) -> list[Any]:
    """Offending ids (or values, or the observed value) of one failed expectation."""
    details = result.get("result") or {}
    index_list = details.get("partial_unexpected_index_list") or []
    if index_list and id_columns:
        return [
            ":".join(str(row.get(column)) for column in id_columns)
            if len(id_columns) > 1
            else row.get(id_columns[0])
            for row in index_list[:SAMPLE_SIZE]
        ]
    if details.get("partial_unexpected_list"):
        return list(details["partial_unexpected_list"][:SAMPLE_SIZE])
    if "observed_value" in details:
        return [details["observed_value"]]
    exception = result.get("exception_info") or {}
    if exception.get("raised_exception"):
        return [exception.get("exception_message")]
    return []


def _signature_difference(found: str, expected: str) -> list[str]:
    """What sets a table's `name type` columns apart from its contract's (schema.py)."""
    present, wanted = found.split(", "), expected.split(", ")
    differences = [f"not in schema.py: {column}" for column in present if column not in wanted]
    differences += [f"missing: {column}" for column in wanted if column not in present]
    return differences or [f"in another order: {found}"]


def _failure_sample(item: dict[str, Any], frame: pd.DataFrame, id_columns: list[str]) -> list[Any]:
    """A failed expectation's sample: the columns that differ for a table's signature (every
    row holds the same one, so row ids say nothing), else offending ids or values."""
    kwargs = item["expectation_config"]["kwargs"]
    if kwargs.get("column") == "schema_signature":
        (expected,) = kwargs["value_set"]  # the contract's, resolved from its parameter
        return _signature_difference(str(frame["schema_signature"].iloc[0]), expected)
    return _sample(item, id_columns)


def _found_and_expected(
    kwargs: dict[str, Any], details: dict[str, Any], parameters: dict[str, Any]
) -> dict[str, Any]:
    """For a failed range expectation, the values found outside it (distinct, the first
    few) and its bounds with their parameters resolved: "found 2107, expected 1973" says
    what "counts add up" alone did not. Other expectations: nothing."""
    if "min_value" not in kwargs and "max_value" not in kwargs:
        return {}

    def resolved(bound: Any) -> Any:
        return parameters.get(bound["$PARAMETER"]) if isinstance(bound, dict) else bound

    found = list(dict.fromkeys(details.get("partial_unexpected_list") or []))[:SAMPLE_SIZE]
    if not found and "observed_value" in details:
        found = [details["observed_value"]]
    return {
        "found": found,
        "expected": [resolved(kwargs.get("min_value")), resolved(kwargs.get("max_value"))],
    }


def run_suite(
    context: Any,
    suite: gx.ExpectationSuite,
    frames: Iterable[pd.DataFrame],
    *,
    id_columns: list[str],
    parameters: dict[str, Any],
) -> SuiteOutcome:
    """Validate every batch of one table against its suite and merge the outcomes.

    Each batch validates itself against the suite (`Batch.validate`): a stored suite and
    validation definition would only add store writes, about a third of a small
    artifact's validation time, to a context that ends with the process.
    """
    asset = context.data_sources.get(DATASOURCE).get_asset(BATCHES)
    batch_definition = asset.get_batch_definition(BATCHES)
    outcome = SuiteOutcome(suite=suite.name)
    result_format = {
        "result_format": "SUMMARY",
        "partial_unexpected_count": SAMPLE_SIZE,
        "unexpected_index_column_names": id_columns,
    }
    for frame in frames:
        batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
        # Nearly every batch passes, and a bare pass/fail costs about two thirds of a
        # summary: only a failing batch is validated again for its counts and sample ids.
        result: ExpectationSuiteValidationResult = batch.validate(
            suite, expectation_parameters=parameters, result_format="BOOLEAN_ONLY"
        )
        if not result.success:
            result = batch.validate(
                suite, expectation_parameters=parameters, result_format=result_format
            )
        outcome.batches += 1
        outcome.evaluated += len(result.results)
        payload = result.to_json_dict()
        for item in payload["results"]:
            if item["success"]:
                continue
            config = item["expectation_config"]
            details = item.get("result") or {}
            outcome.failures.append(
                {
                    "suite": suite.name,
                    "batch": outcome.batches,
                    "expectation": config["type"],
                    "description": config.get("description") or "",
                    "column": config["kwargs"].get("column"),
                    "unexpected_count": details.get("unexpected_count"),
                    "sample": _failure_sample(item, frame, id_columns),
                    **_found_and_expected(config["kwargs"], details, parameters),
                }
            )
        outcome.results.append(
            {
                "batch": outcome.batches,
                "rows": len(frame),
                "success": payload["success"],
                "statistics": payload["statistics"],
            }
        )
    return outcome
