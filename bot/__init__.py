"""The edges of Countersign: aiohttp app and agent webhook, Slack (bolt) listeners and Block Kit,
the callback sender, configuration and the CLI."""

__all__ = [
    "app",
    "blocks",
    "callbacks",
    "cli",
    "config",
    "embedded_pg",
    "http_errors",
    "live_config",
    "logs",
    "messages",
    "openapi",
    "slack_app",
    "slack_cards",
    "slack_directory",
    "slack_setup",
    "webhook",
]
