"""Slack Web API: a paced, retrying client (`client`), its pacing (`pacing`), and `sync`,
which keeps the canonical store fresh from the API with durable per-channel checkpoints."""
