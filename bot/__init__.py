"""The edges of Countersign: aiohttp app and agent webhook, Slack (bolt) listeners and Block Kit,
the callback sender, configuration and the CLI."""

__all__ = ["app", "blocks", "callbacks", "cli", "config", "messages", "slack_app", "webhook"]
