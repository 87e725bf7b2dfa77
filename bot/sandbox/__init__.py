"""The sandbox: Slack on your laptop. Without ``SLACK_BOT_TOKEN``, ``countersign run`` serves a
stand-in of Slack's Web API (:mod:`bot.sandbox.standin`) on loopback, so that a newcomer and the
tests exercise exactly the paths a workspace would."""
