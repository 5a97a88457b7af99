"""Install DuckDB's FTS extension from its PyPI package, so nothing downloads at run time.

`import_extension` copies the packaged extension into the user's DuckDB extension folder;
after that `INSTALL fts` is a no-op and `LOAD fts` works offline (dbt-duckdb's
`extensions:` profile setting included). `make setup` runs this module once.
"""

import duckdb
from duckdb_extensions import import_extension

EXTENSIONS = ("fts",)


def install_extensions() -> None:
    """Copy every extension the project needs into DuckDB's extension folder."""
    for name in EXTENSIONS:
        import_extension(name)


def connect(path: str = ":memory:", *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB connection with the project's extensions loaded."""
    connection = duckdb.connect(path, read_only=read_only)
    for name in EXTENSIONS:
        try:
            connection.execute(f"load {name}")
        except duckdb.IOException:
            install_extensions()
            connection.execute(f"load {name}")
    return connection


if __name__ == "__main__":
    install_extensions()
    print("duckdb extensions installed: " + ", ".join(EXTENSIONS))
