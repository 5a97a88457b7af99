"""Great Expectations suites for search artifacts, as code (no gx/ folder, no YAML).

Each published table has a module in `expectations.suites`; `expectations.checkpoint`
validates a candidate artifact, opened read-only in a process of its own, against all of them.
"""
