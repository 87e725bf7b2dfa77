"""The Slack edge: a bolt ``AsyncApp`` in HTTP mode, mounted on the shared aiohttp application.

Listeners ``ack()`` first (Slack allows 3 s), then do the work; nothing escapes a listener.
Parsing the payload (:mod:`bot.interactions`) and rendering Block Kit (:mod:`bot.rendering`)
are pure functions.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, assert_never

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from approvals import errors, metrics, models, service
from bot import grant_views, interactions, messages, rendering

__all__ = ["MAX_PAYLOAD", "Listeners", "build_slack_app", "mount"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# The largest body read on /slack/ (bot.agent_api.BODY_LIMITS; the agent API has a tighter limit
# and every other path aiohttp's default of 1 MiB). Slack's interaction payloads echo the whole
# surface the click came from, and Slack sends every non-ASCII character as a \uXXXX escape
# inside a form-encoded field, so each UTF-16 unit of our text can cost 8 bytes on the wire.
# Measured on our own renderings at their limits (tests/unit/test_slack_payload_size.py): a card
# click is under 100 KB, a Deny submission under 120 KB, but a click in a full App Home (20
# requests, summaries and arguments all emoji) about 1.2 MB: past aiohttp's default of 1 MiB.
# 2 MiB leaves room for the fields Slack adds; it is still a bound on what one request can cost.
MAX_PAYLOAD = 2 * 1024 * 1024


async def _card_links(
    client: AsyncWebClient, approvals: list[models.Approval], limit: int
) -> dict[str, str]:
    """Permalinks of the cards of the queued requests that are too long to decide in the
    queue (those get a link instead of buttons). A failed look-up is left out: the rendering
    falls back to a link to the card's channel."""
    links: dict[str, str] = {}
    for approval in approvals[:limit]:
        card = approval.card
        if card is None or rendering.fits(approval):
            continue
        try:
            found: Any = await client.chat_getPermalink(channel=card.channel, message_ts=card.ts)
            links[approval.approval_id] = str(found["permalink"])
        except Exception:
            log.warning(
                "card permalink not fetched",
                extra={"action": "queue", "approval_id": approval.approval_id},
            )
    return links


async def _ephemeral(client: AsyncWebClient, channel: str | None, user: str, text: str) -> None:
    if channel is None:
        log.info("no channel for an ephemeral answer", extra={"action": "click", "user": user})
        return
    try:
        await client.chat_postEphemeral(channel=channel, user=user, text=text)
    except SlackApiError as exc:
        log.warning(
            "ephemeral answer failed",
            extra={"action": "click", "error": exc.response.get("error"), "user": user},
        )
    except Exception:  # the click is already recorded; a lost "why not" must not crash
        log.exception("ephemeral answer failed", extra={"action": "click", "user": user})


async def _respond_ephemeral(
    respond: AsyncRespond, user: str, text: str, answer_blocks: list[dict[str, Any]]
) -> None:
    """Answer a slash command through its ``response_url``: unlike chat.postEphemeral it
    works in any channel or DM, the bot a member or not. bolt only runs a listener for a
    request whose Slack signature it verified, so the URL is one Slack itself sent."""
    extra = {"action": "queue", "user": user}
    if respond.response_url is None:
        log.info("no response_url for the command's answer", extra=extra)
        return
    try:
        answered = await respond(text=text, blocks=answer_blocks, response_type="ephemeral")
    except Exception:  # the answer is a courtesy: a lost one must not crash the listener
        log.exception("command answer failed", extra=extra)
        return
    if answered.status_code != 200:  # e.g. expired: Slack takes 5 answers in 30 minutes
        log.warning(
            "command answer refused",
            extra={**extra, "status": answered.status_code, "error": answered.body},
        )


async def _tell(client: AsyncWebClient, click: interactions.Click, text: str) -> None:
    """An ephemeral answer to the clicker, where they clicked."""
    await _ephemeral(client, click.channel_id, click.user_id, text)


async def _after_ack(
    client: AsyncWebClient, click: interactions.Click, what: str, work: Awaitable[T]
) -> T | None:
    """A form's action, run once its submission was acked: what it returns, or None once a
    failure was logged and told to the clicker (the form is closed by then)."""
    extra = {"action": what, "approval_id": click.approval_id}
    try:
        return await work
    except errors.DatabaseUnavailable:
        log.warning("%s while the database is away: not recorded", what, extra=extra)
        await _tell(client, click, messages.DATABASE_AWAY)
    except Exception:
        log.exception("%s failed", what, extra=extra)
        await _tell(client, click, rendering.click_problem("an internal error (logged)"))
    return None


def _outcome_label(result: service.ClickResult) -> str:
    """The clicks metric's label for a result (exhaustive: a new result must be named here)."""
    match result:
        case service.Settled() | service.Voted():
            return "accepted"
        case service.Duplicate():
            return "duplicate"
        case service.Stale():
            return "stale"
        case service.Expired():
            return "expired"
        case service.Outdated():
            return "edited"
        case service.Refused(verdict=verdict):
            return verdict.outcome.value
        case service.PasskeyAsked():
            return "passkey_asked"
        case _:
            assert_never(result)


@dataclass(frozen=True)
class Listeners:
    """What the listeners do after their ``ack()``. No method raises: whatever goes wrong is
    logged and, where someone is waiting for an answer, told to them."""

    approvals: service.ApprovalService
    directory: service.ApproverDirectory
    presets: Callable[[], tuple[str, ...]] = tuple
    # where step-up's confirmation links point (COUNTERSIGN_PUBLIC_URL), when configured
    public_url: str | None = None

    async def publish_home(self, client: AsyncWebClient, user: str) -> None:
        """Publish the viewer's App Home: their queue and their requests."""
        try:
            queue = await self.approvals.queue_for(user, self.directory, rendering.HOME_ITEMS)
            links = await _card_links(client, queue.decidable, rendering.HOME_ITEMS)
            revocable = await self.approvals.revocable_grants(user, self.directory)
            view = rendering.home_view(
                queue.decidable,
                queue.requested,
                links,
                unjudged=queue.unjudged,
                unjudged_more=queue.unjudged_more,
                revocable=revocable,
                now=self.approvals.now(),
            )
            await client.views_publish(user_id=user, view=view)
        except Exception:
            log.exception("App Home not published", extra={"action": "home", "user": user})

    async def answer_queue_command(
        self, body: dict[str, Any], client: AsyncWebClient, respond: AsyncRespond
    ) -> None:
        """The ``/approvals`` answer, as an ephemeral message."""
        user = body.get("user_id")
        if not isinstance(user, str):
            return
        try:
            queue = await self.approvals.queue_for(user, self.directory, rendering.MESSAGE_ITEMS)
            links = await _card_links(client, queue.decidable, rendering.MESSAGE_ITEMS)
        except Exception:
            log.exception("queue failed", extra={"action": "queue"})
            return
        text, answer = rendering.queue_message(
            queue.decidable,
            queue.requested,
            links,
            unjudged=queue.unjudged,
            unjudged_more=queue.unjudged_more,
        )
        await _respond_ephemeral(respond, user, text, answer)

    async def handle_click(self, body: dict[str, Any], client: AsyncWebClient) -> None:
        """A button: Approve counts at once, Deny opens the modal."""
        user = (body.get("user") or {}).get("id")
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get(
            "channel_id"
        )
        try:
            click = interactions.parse_click(body)
        except ValueError as exc:
            log.warning("malformed click", extra={"action": "click", "error": str(exc)})
            if isinstance(user, str):
                await _ephemeral(client, channel, user, rendering.click_problem(str(exc)))
            return
        if click.action == "deny":
            await self._open_deny_form(body, client, click)
            return
        if click.action == "edit":
            await self._open_edit_form(body, client, click)
            return
        if click.action == "grant":
            await self._open_grant_form(body, client, click)
            return
        await self.decide(client, click)

    async def _open_grant_form(
        self, body: dict[str, Any], client: AsyncWebClient, click: interactions.Click
    ) -> None:
        """Approve & allow more opens the form; only its submission approves and grants. On a
        settled request, or one whose rule allows no grant (any more), the click is answered as
        an Approve would be."""
        await self._open_form(
            body, client, click, messages.GRANT_FORM_FAILED, grant_views.grantable,
            grant_views.grant_modal,
        )  # fmt: skip

    async def handle_grant_submission(
        self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient
    ) -> None:
        """The grant form was submitted: what is wrong with the terms themselves is shown in
        the form, which stays open; then it is acked and the call approved with the grant (who
        grants is judged after the ack, as a click is)."""
        try:
            submission = interactions.parse_grant_submission(body)
            refused = await self.approvals.check_grant(submission.approval_id, submission.terms)
        except (ValueError, errors.NotFound) as exc:
            log.warning("unusable grant submission", extra={"action": "grant", "error": str(exc)})
            await ack()
            return
        except errors.DatabaseUnavailable:
            log.warning("grant submitted while the database is away", extra={"action": "grant"})
            await ack(
                response_action="errors",
                errors={interactions.SCOPE_BLOCK: messages.DATABASE_AWAY},
            )
            return
        if refused is not None and not any(p.forged for p in refused.problems):
            await ack(response_action="errors", errors=grant_views.grant_errors(refused))
            return
        await ack()  # a forged submission goes on, to be refused and recorded by the service
        click = submission.click
        result = await _after_ack(
            client,
            click,
            "grant",
            self.approvals.grant(
                click.approval_id,
                slack_user_id=click.user_id,
                terms=submission.terms,
                directory=self.directory,
                seen=submission.seen,
            ),
        )
        if result is None:
            return
        if isinstance(result, service.GrantRefused):
            await _tell(client, click, grant_views.grant_answer(result))
            return
        metrics.CLICKS.labels(_outcome_label(result)).inc()
        text = rendering.click_answer(result, self.public_url)
        if text is not None:
            await _tell(client, click, text)

    async def handle_revoke(self, body: dict[str, Any], client: AsyncWebClient) -> None:
        """A standing grant's Revoke (on its card or in the App Home)."""
        try:
            grant_id, user, channel = interactions.parse_revoke(body)
        except ValueError as exc:
            log.warning("malformed revoke", extra={"action": "revoke", "error": str(exc)})
            return
        try:
            result = await self.approvals.revoke_grant(
                grant_id, slack_user_id=user, directory=self.directory
            )
        except errors.DatabaseUnavailable:
            await _ephemeral(client, channel, user, messages.DATABASE_AWAY)
            return
        except Exception:
            log.exception("revoke failed", extra={"action": "revoke", "grant_id": grant_id})
            await _ephemeral(client, channel, user, rendering.click_problem("an internal error"))
            return
        if result.revoked:
            await _ephemeral(client, channel, user, messages.REVOKED_ANSWER)
        else:
            text = messages.REVOKE_REFUSED.format(why=result.refusal or "unknown")
            await _ephemeral(client, channel, user, text)

    async def _open_edit_form(
        self, body: dict[str, Any], client: AsyncWebClient, click: interactions.Click
    ) -> None:
        """Edit & approve opens the form; only its submission edits (as only the Deny modal
        denies). On a settled request the click is answered as a late Approve would be."""
        await self._open_form(
            body, client, click, messages.EDIT_FORM_FAILED, lambda _: True, rendering.edit_modal
        )

    async def _open_form(
        self,
        body: dict[str, Any],
        client: AsyncWebClient,
        click: interactions.Click,
        failed: str,
        offered: Callable[[models.Approval], bool],
        form: Callable[[models.Approval, str | None], dict[str, Any]],
    ) -> None:
        """Open the ``form`` a button of a pending card asks for (views.open with the click's
        trigger, good for 3 s); on a settled request, or one the form is not ``offered`` for,
        the click is answered as a late Approve would be. What fails is told (``failed``)."""
        approval = await self._clicked_approval(client, click, failed)
        if approval is None:
            return
        if approval.settled or not offered(approval):
            await self.decide(client, click)
            return
        trigger_id = body.get("trigger_id")
        if not isinstance(trigger_id, str) or not trigger_id:
            await _tell(client, click, failed)
            return
        try:
            await client.views_open(trigger_id=trigger_id, view=form(approval, click.channel_id))
        except Exception:
            log.exception("a form did not open", extra={"action": click.action})
            await _tell(client, click, failed)

    async def _open_deny_form(
        self, body: dict[str, Any], client: AsyncWebClient, click: interactions.Click
    ) -> None:
        """A Deny click opens the modal; only its submission can deny.

        A Deny without the modal never settles, even where the rule makes the reason optional:
        the submission is the one place the reason rule is checked and the denier confirms, and
        a button click from Slack always carries a ``trigger_id``, so one without it is not a
        click we can trust to mean "deny now". Without a trigger, or when views.open fails, the
        clicker is told and the request stays pending. On a settled request the click is
        recorded as stale and answered like any other late click.
        """
        approval = await self._clicked_approval(client, click, messages.DENY_FORM_FAILED)
        if approval is None:
            return
        if approval.settled:
            await self.decide(client, click)
            return
        trigger_id = body.get("trigger_id")
        if not isinstance(trigger_id, str) or not trigger_id:
            log.warning(
                "Deny click without a trigger_id",
                extra={"action": "click", "approval_id": click.approval_id},
            )
            await _tell(client, click, messages.DENY_FORM_FAILED)
            return
        modal = rendering.deny_modal(approval, click.channel_id, self.presets())
        try:
            # the trigger_id is only good for 3 s after the click
            await client.views_open(trigger_id=trigger_id, view=modal)
        except Exception:
            log.exception("the Deny modal did not open", extra={"action": "click"})
            await _tell(client, click, messages.DENY_FORM_FAILED)

    async def _clicked_approval(
        self, client: AsyncWebClient, click: interactions.Click, failed: str
    ) -> models.Approval | None:
        """The approval a click that opens a form names; None once the clicker was told why
        there is none (``failed``: what they are told when it cannot be read)."""
        extra = {"action": "click", "approval_id": click.approval_id}
        try:
            return await self.approvals.get(click.approval_id)
        except errors.NotFound:
            await _tell(client, click, messages.UNKNOWN_APPROVAL)
        except errors.DatabaseUnavailable:
            log.warning("form click while the database is away", extra=extra)
            await _tell(client, click, messages.DATABASE_AWAY)
        except Exception:
            log.exception("form click failed", extra=extra)
            await _tell(client, click, failed)
        return None

    async def handle_deny_submission(
        self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient
    ) -> None:
        """The Deny modal was submitted: validate in the modal, then count it."""
        try:
            submission = interactions.parse_deny_submission(body, self.presets())
            approval = await self.approvals.get(submission.approval_id)
        except (ValueError, errors.NotFound) as exc:
            log.warning("unusable Deny submission", extra={"action": "deny", "error": str(exc)})
            await ack()
            return
        except errors.DatabaseUnavailable:
            # found away before the ack: the modal stays open with the reason typed, to be
            # submitted again (away only after the ack, decide tells the clicker so)
            log.warning("Deny submitted while the database is away", extra={"action": "deny"})
            await ack(
                response_action="errors", errors={interactions.REASON_BLOCK: messages.DATABASE_AWAY}
            )
            return
        if approval.required.deny_reason and not submission.reason and not approval.settled:
            # errors are shown in the modal, which stays open (Slack's response_action)
            errors_shown = {interactions.REASON_BLOCK: messages.REASON_REQUIRED}
            await ack(response_action="errors", errors=errors_shown)
            return
        # acked before the decision is stored: Slack wants its answer within 3 s, and counting
        # the decision asks Slack for the clicker's groups first (see the listeners' ack-first
        # rule); a failure from here on is told as an ephemeral, the modal already closed
        await ack()
        await self.decide(client, submission.click, reason=submission.reason or None)

    async def handle_edit_submission(
        self, ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient
    ) -> None:
        """The edit form was submitted: what is wrong with the values themselves is shown in
        the form, which stays open; then the edit is acked and applied (who edits is judged
        after the ack, as a click is: the directory may take longer than Slack waits)."""
        try:
            submission = interactions.parse_edit_submission(body)
            refused = await self.approvals.check_edit(
                submission.approval_id, submission.changes, submission.seen, submission.note
            )
        except (ValueError, errors.NotFound) as exc:
            log.warning("unusable edit submission", extra={"action": "edit", "error": str(exc)})
            await ack()
            return
        except errors.DatabaseUnavailable:
            log.warning("edit submitted while the database is away", extra={"action": "edit"})
            await ack(
                response_action="errors", errors={interactions.NOTE_BLOCK: messages.DATABASE_AWAY}
            )
            return
        if refused is not None and not any(p.forged for p in refused.problems):
            await ack(response_action="errors", errors=rendering.edit_errors(refused))
            return
        await ack()  # a forged submission goes on, to be refused and recorded by the edit
        click = submission.click
        result = await _after_ack(
            client,
            click,
            "edit",
            self.approvals.edit(
                click.approval_id,
                slack_user_id=click.user_id,
                changes=submission.changes,
                directory=self.directory,
                note=submission.note or None,
                seen=submission.seen,
            ),
        )
        if result is None:
            return
        text = rendering.edit_answer(result, self.public_url)
        if text is not None:
            await _tell(client, click, text)

    async def decide(
        self, client: AsyncWebClient, click: interactions.Click, reason: str | None = None
    ) -> None:
        """Count a decision and tell the clicker what became of it."""
        try:
            result = await self.approvals.click(
                click.approval_id,
                action="deny" if click.action == "deny" else "approve",  # a late edit: approve
                slack_user_id=click.user_id,
                directory=self.directory,
                reason=reason,
                arguments_sha256=click.seen,
            )
        except errors.NotFound:
            await _tell(client, click, messages.UNKNOWN_APPROVAL)
            return
        except errors.DatabaseUnavailable:
            extra = {"action": "click", "approval_id": click.approval_id}
            log.warning("click while the database is away: not recorded", extra=extra)
            await _tell(client, click, messages.DATABASE_AWAY)
            return
        except Exception:
            extra = {"action": "click", "approval_id": click.approval_id}
            log.exception("click failed", extra=extra)
            await _tell(
                client, click, rendering.click_problem("an internal error (logged); try again")
            )
            return
        metrics.CLICKS.labels(_outcome_label(result)).inc()
        text = rendering.click_answer(result, self.public_url)
        if text is not None:
            await _tell(client, click, text)


def build_slack_app(
    *,
    client: AsyncWebClient,
    signing_secret: str,
    service: service.ApprovalService,
    directory: service.ApproverDirectory,
    presets: Callable[[], tuple[str, ...]] = tuple,
    public_url: str | None = None,
) -> AsyncApp:
    app = AsyncApp(client=client, signing_secret=signing_secret, process_before_response=False)
    listeners = Listeners(
        approvals=service, directory=directory, presets=presets, public_url=public_url
    )
    _listen_for_decisions(app, listeners)
    _listen_for_queues(app, listeners)
    app.error(_on_error)
    return app


def _listen_for_decisions(app: AsyncApp, listeners: Listeners) -> None:
    """The buttons (on a card or in a queue) and the Deny modal's submission."""

    @app.action(
        re.compile(
            f"^({interactions.APPROVE}|{interactions.DENY}|{interactions.EDIT}"
            f"|{interactions.GRANT})$"
        )
    )
    async def on_decision(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        await listeners.handle_click(body, client)
        view = body.get("view")
        user = (body.get("user") or {}).get("id")
        if isinstance(view, dict) and view.get("type") == "home" and isinstance(user, str):
            await listeners.publish_home(client, user)  # the queue moved on

    @app.view(interactions.DENY_VIEW)
    async def on_deny_reason(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await listeners.handle_deny_submission(ack, body, client)

    @app.view(interactions.EDIT_VIEW)
    async def on_edit(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await listeners.handle_edit_submission(ack, body, client)

    @app.view(interactions.GRANT_VIEW)
    async def on_grant(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await listeners.handle_grant_submission(ack, body, client)

    @app.action(interactions.REVOKE)
    async def on_revoke(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        await listeners.handle_revoke(body, client)
        view = body.get("view")
        user = (body.get("user") or {}).get("id")
        if isinstance(view, dict) and view.get("type") == "home" and isinstance(user, str):
            await listeners.publish_home(client, user)


def _listen_for_queues(app: AsyncApp, listeners: Listeners) -> None:
    """What a person may decide and has requested: the App Home and ``/approvals``."""

    @app.event("app_home_opened")
    async def on_home(event: dict[str, Any], client: AsyncWebClient) -> None:
        user = event.get("user")
        if isinstance(user, str) and event.get("tab", "home") == "home":
            await listeners.publish_home(client, user)

    @app.command("/approvals")
    async def on_approvals(
        ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient, respond: AsyncRespond
    ) -> None:
        await ack()
        await listeners.answer_queue_command(body, client, respond)


async def _on_error(error: Exception, body: dict[str, Any]) -> None:
    log.error("slack listener error", extra={"action": "slack", "error": repr(error)})


def mount(
    web_app: web.Application,
    slack_app: AsyncApp,
    signing_secret: str,
    path: str = "/slack/events",
) -> None:
    verifier = SignatureVerifier(signing_secret)

    async def events(request: web.Request) -> web.Response:
        # bolt verifies the signature and the timestamp before any listener runs
        try:
            bolt_request = await to_bolt_request(request)
        except web.HTTPRequestEntityTooLarge:
            raise  # over the /slack/ body limit: aiohttp's own 413, the body left unread
        except Exception:  # bolt parses while it builds the request: any shape error lands here
            # bolt cannot even parse the body. Signed by Slack: ack it so Slack does not retry,
            # and log; unsigned: refuse like bolt would.
            body = await request.text()
            if not verifier.is_valid_request(body, dict(request.headers)):
                return web.json_response({"error": "invalid_signature"}, status=401)
            log.warning("unparsable Slack payload acked", extra={"action": "slack"})
            return web.Response(status=200)
        try:
            response = await slack_app.async_dispatch(bolt_request)
        except Exception:
            # a signed payload bolt cannot handle (e.g. a JSON list): ack it, log it, never 500
            log.exception("Slack payload failed in dispatch", extra={"action": "slack"})
            return web.Response(status=200)
        if response.status >= 500:
            # bolt caught a failure in its own middleware (logged by on_error); a retry from
            # Slack would fail the same way, so ack instead of inviting one
            return web.Response(status=200)
        return await to_aiohttp_response(response)

    web_app.router.add_post(path, events)
