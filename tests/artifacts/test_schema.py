"""The artifact schema's version moves with its layout: serving, validation and `reconcile`
tell artifacts apart by the version alone."""

import hashlib

from slackquery.artifacts import arrays, documents, schema

# The layout each version stands for (`layout_digest`). A column or array added, dropped,
# renamed or retyped under an unchanged version let `reconcile` publish an older build of
# the old layout, which validation then refused on every run until `--force-build`.
LAYOUT_OF_VERSION = {10: "ed3aa11d73bbb3fee53d79a5a507739575b00e68136ce34fd583c2c260cce272"}


def layout_digest() -> str:
    """sha256 of every table's columns, the display columns and the arrays' dtypes."""
    parts = [
        *(
            f"{table}: {schema.schema_signature(columns)}"
            for table, columns in schema.TABLE_COLUMNS.items()
        ),
        "display: " + ", ".join(documents.DISPLAY_COLUMNS),
        *(f"{name} {dtype.str}" for name, dtype in sorted(arrays.DTYPES.items())),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def test_a_change_of_the_artifact_layout_comes_with_a_new_schema_version() -> None:
    assert LAYOUT_OF_VERSION.get(schema.SCHEMA_VERSION) == layout_digest(), (
        "the artifact layout changed: raise SCHEMA_VERSION in slackquery/artifacts/schema.py "
        f"(and say what changed in its docstring), then record {layout_digest()} for it here"
    )
