"""Prefect flows of the pipeline, one per module (the module name is the flow's job)."""
