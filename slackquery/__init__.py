"""Slackquery: Slack history as an offline, validated, hybrid search service."""

__version__ = "0.1.0"
