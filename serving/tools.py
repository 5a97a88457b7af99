"""The four MCP tools and the boundary every call crosses. Their docstrings are the contract
an agent reads to pick a tool; the limits in them are formatted from settings.

The boundary (`ToolServer.call_tool` and `ToolRunner.run`) makes every failure one short
line an agent can act on:
- argument validation: one line naming each bad field and what was expected, never
  pydantic's multi-line dump with its class names and links;
- `SlackqueryError` (bad input, spent budget, busy): its own message, except the server's
  own faults (no servable artifact, an embedder of another generation): the operator's
  reason, which names files and URLs, goes to the log once, requesters get a fixed line
  (`serving.faults`);
- anything else is a bug: the traceback is logged here with a request id, and the client
  gets only that id, never "Error executing tool" with nothing to go on.
Every message is capped (`MAX_ERROR_CHARS`) with control characters escaped, since most
of them quote the input back.

Cost is bounded here too: at most `serve_max_in_flight` calls run at once (more get a
`busy` error at once, never an unbounded queue), and each call gets a `Deadline` of
`serve_request_budget_s` that the engine checks between stages.
"""

import inspect
import json
import logging
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, Literal, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_PARAMS,
    PARSE_ERROR,
    CallToolResult,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    TextContent,
)
from pydantic import Field, Strict, ValidationError, WithJsonSchema, WrapValidator

from serving.access import current_requester
from serving.answers import BRACKETED_CITATION, URL_IN_TEXT
from serving.budget import BudgetExceeded, Deadline
from serving.engine import (
    MAX_CONTEXT_MESSAGES,
    MAX_FILTER_VALUE_CHARS,
    MAX_SCOPE_LIMIT,
    MAX_THREAD_LIMIT,
    SearchEngine,
)
from serving.faults import SERVER_FAULTS, public_reason
from serving.metrics import Metrics
from serving.models import (
    MessageResponse,
    ScopesResponse,
    SearchRequest,
    SearchResponse,
    ThreadResponse,
)
from serving.query import is_unicode_text
from slackquery.artifacts.schema import CONVERSATION_TYPES
from slackquery.errors import SlackqueryError
from slackquery.escaping import escape_controls, quoted
from slackquery.settings import Settings

T = TypeVar("T")
logger = logging.getLogger(__name__)
# One line per tool call; its own name, so that an operator can route or silence it.
access_log = logging.getLogger("serving.access_log")

MAX_ERROR_CHARS = 300
# Where a long message is cut: its start says what failed, its end what to do about it.
_HEAD, _TAIL = 170, 100


def _keep_none(value: object, handler: Callable[[object], str]) -> str | None:
    return None if value is None else handler(value)


# An optional text argument, taken as given. The SDK JSON-decodes a string argument of any
# parameter not annotated exactly `str` (so `cursor="null"` arrived as None and a garbage
# cursor silently restarted at page 1); annotated `str`, with JSON null let through here.
OptionalText = Annotated[
    str,
    WrapValidator(_keep_none),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}),
]


def described(annotation: Any, description: str) -> Any:
    """`annotation` with `description` in the tool's input schema, beside the parameter:
    clients show it there, while the tool's description is prose read as a whole."""
    return Annotated[annotation, Field(description=description)]


def page_size(items: str, most: int, default: int) -> Any:
    """A page's `limit` parameter: `items` per page, 1 to `most`."""
    return described(ranged(1, most), f"{items} per page, 1-{most}. Default: {default}.")


def next_page(same: str) -> Any:
    """A `cursor` parameter, valid with the same `same` as the page it came from."""
    return described(
        OptionalText,
        f"The previous page's next_cursor, with the same {same}. Default: the first page.",
    )


# The kinds of conversation a search may keep (public, private, dm, group_dm).
ConversationTypes = described(
    list[Literal[CONVERSATION_TYPES]] | None, "Only these kinds of conversation. Default: all."
)
# Timestamps stay within int64, the artifact's column type.
TimestampUs = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
StartTsUs = described(
    TimestampUs | None,
    "Only messages posted at or after this time (inclusive): microseconds since the epoch, "
    "UTC. Default: no bound.",
)
EndTsUs = described(
    TimestampUs | None,
    "Only messages posted at or before this time (inclusive): microseconds since the epoch, "
    "UTC. Default: no bound.",
)
# What the filter lists of search_slack and answer_slack_question keep.
WORKSPACE_FILTER = "Only these workspaces: ids, slugs or names. Default: all."
CHANNEL_FILTER = 'Only these channels: ids or names such as "#eng". Default: all.'
AUTHOR_FILTER = 'Only messages by these people: ids or names such as "@priya". Default: all.'
# A count a client sends as a JSON integer: strict, since lax validation reads `true` as 1
# and "3" as 3, which hides a client's bug behind a plausible result.
Count = Annotated[int, Strict()]


def ranged(low: int, high: int) -> Any:
    """A Count whose input schema states its range, so a client can check it before calling;
    the engine enforces the range, in one line that names the setting behind it."""
    return Annotated[Count, Field(json_schema_extra={"minimum": low, "maximum": high})]


def text_of_at_most(max_chars: int) -> Any:
    """A text whose input schema states its length limit (enforced by the engine)."""
    return Annotated[str, Field(json_schema_extra={"maxLength": max_chars})]


def filter_values(settings: Settings) -> Any:
    """A filter's list whose input schema states how many values of what length it takes
    (enforced by the engine); JSON null or left out: no filter."""
    value = text_of_at_most(MAX_FILTER_VALUE_CHARS)
    limit = {"maxItems": settings.search_max_filter_values}
    return Annotated[list[value], Field(json_schema_extra=limit)] | None


def one_line(message: str) -> str:
    """The message on one line (control characters escaped), cut in the middle to
    `MAX_ERROR_CHARS`."""
    text = escape_controls(message)
    if len(text) <= MAX_ERROR_CHARS:
        return text
    cut = len(text) - _HEAD - _TAIL
    return f"{text[:_HEAD]}… [{cut} characters cut] …{text[-_TAIL:]}"


def validation_message(tool: str, error: ValidationError) -> str:
    """One line for arguments that fail the tool's input schema: each field and what it needs."""
    problems = []
    for item in error.errors(include_url=False):
        field = ".".join(str(part) for part in item["loc"]) or "arguments"
        problem = f"{field}: {item['msg']}"
        if item["type"] != "missing":
            problem += f" (got {quoted(item.get('input'))})"
        problems.append(problem)
    return f"invalid arguments for {tool}: " + "; ".join(problems)


def _has_surrogate(value: object) -> bool:
    if isinstance(value, str):
        return not is_unicode_text(value)
    if isinstance(value, list | tuple):
        return any(_has_surrogate(item) for item in value)
    if isinstance(value, dict):
        return any(_has_surrogate(key) or _has_surrogate(item) for key, item in value.items())
    return False


def _internal_error(tool: str) -> ToolError:
    """Log the exception being handled with a new request id; the error that names only it."""
    request_id = uuid.uuid4().hex[:12]
    logger.exception("%s failed unexpectedly (request id %s)", tool, request_id)
    return ToolError(
        f"internal error in {tool} (request id {request_id}); the server logged the details, "
        "please report the id"
    )


class ToolServer(MCPServer):
    """The MCP server whose tool errors are always one short line (see the module doc).

    A call refused before its tool runs (unknown tool, bad arguments) is counted in
    `metrics` under the mode `invalid` (tool `unknown` for a name no tool has); the tool
    bodies count their own calls (`ToolRunner`).
    """

    metrics: Metrics | None = None
    # How long a stdio server whose input has ended waits for the answers it still owes.
    drain_s: float = 15.0

    async def run_stdio_async(self) -> None:
        """The SDK's stdio transport, with a reply to each request it cannot parse, and to
        each request read before the input ended."""
        async with stdio_server() as (read_stream, write_stream):
            replies = Replies(write_stream)
            await self._lowlevel_server.run(
                StdioRequests(read_stream, replies, self.drain_s),
                replies,
                self._lowlevel_server.create_initialization_options(),
            )

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Any = None
    ) -> CallToolResult:  # type: ignore[override]
        parameters = {tool.name: tool.input_schema for tool in await self.list_tools()}
        try:
            if name in parameters:
                _refuse_arguments(name, arguments, parameters[name].get("properties", {}))
            result = await super().call_tool(name, arguments, context)
            return _compact_text_copy(result)  # type: ignore[arg-type]
        except UnexpectedToolError:  # not from a tool body (ToolRunner catches those): a bug
            raise _internal_error(name) from None
        except ToolError as error:
            cause = error.__cause__
            refused = isinstance(error, _Refused) or isinstance(cause, ValidationError)
            if self.metrics is not None and (refused or name not in parameters):
                tool = name if name in parameters else "unknown"
                record_call(self.metrics, tool, "invalid", 0.0, "refused")
            if isinstance(cause, ValidationError):
                raise ToolError(one_line(validation_message(name, cause))) from None
            raise ToolError(one_line(str(cause or error))) from None

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Any = None
    ) -> Any:
        """The SDK's prompt, with an unknown name, a missing or an unknown argument refused
        as invalid params, as the spec asks (the SDK answers each as an internal error, and
        logs a traceback for it)."""
        prompts = {prompt.name: prompt for prompt in await self.list_prompts()}
        if name not in prompts:
            raise MCPError(INVALID_PARAMS, f"unknown prompt {quoted(name)}")
        parameters = prompts[name].arguments or []
        given = set(arguments or {})
        missing = sorted({item.name for item in parameters if item.required} - given)
        if missing:
            raise MCPError(INVALID_PARAMS, f"{name} needs the argument {', '.join(missing)}")
        unknown = sorted(given - {item.name for item in parameters})
        if unknown:
            raise MCPError(INVALID_PARAMS, f"{name} takes no argument {quoted(', '.join(unknown))}")
        return await super().get_prompt(name, arguments, context)


def _compact_text_copy(result: CallToolResult) -> CallToolResult:
    """The result with its text copy (the spec's backwards-compatible one, which many
    clients hand to the model instead of the structured content) written as compact JSON
    of the structured content: the SDK indents it, ~20% more characters, more than the
    response budget (`serve_max_response_chars`, which counts compact JSON) allows for."""
    if result.structured_content is None or result.is_error:
        return result
    text = json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))
    return result.model_copy(update={"content": [TextContent(type="text", text=text)]})


class _StreamWrapper:
    """A transport stream of the SDK's, wrapped: closing it closes the inner one."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> "_StreamWrapper":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class Replies(_StreamWrapper):
    """The write side of a stdio connection, noting which requests are still unanswered."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.unanswered: set[int | str] = set()
        self._answered = anyio.Event()

    async def send(self, item: Any) -> None:
        await self._inner.send(item)
        message = getattr(item, "message", None)
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            self.unanswered.discard(message.id)
            self._answered.set()

    async def all_answered(self, within_s: float) -> None:
        """Return once every request read so far is answered, or after `within_s`."""
        with anyio.move_on_after(within_s):
            while self.unanswered:
                await self._answered.wait()
                self._answered = anyio.Event()


class StdioRequests(_StreamWrapper):
    """A stdio transport's read stream, with two repairs.

    Over stdio the SDK hands a line it cannot parse (a lone surrogate escape such as
    `\\ud800`, which its JSON parser refuses) to the session as an exception, which drops
    it: the client waited for its reply forever (over HTTP the same body gets a 400). The
    line is still JSON to Python's parser, which names the request to answer with a parse
    error.

    And when the input ends, the SDK cancels the requests still running: a script that
    pipes `initialize` and a tool call got only the first answer. The end is held back
    until every request read is answered (at most `drain_s`).
    """

    def __init__(self, inner: Any, replies: Replies, drain_s: float) -> None:
        super().__init__(inner)
        self._replies = replies
        self._drain_s = drain_s

    @property
    def last_context(self) -> Any:
        """The sender's context of the last item, where the inner stream carries one."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            try:
                item = await self._inner.receive()
            except anyio.EndOfStream:
                await self._replies.all_answered(self._drain_s)
                raise
            message = getattr(item, "message", None)
            if isinstance(message, JSONRPCRequest):
                self._replies.unanswered.add(message.id)
            request_id = _unparsed_request_id(item)
            if request_id is None:
                return item
            error = ErrorData(
                code=PARSE_ERROR,
                message="the message could not be parsed (a lone surrogate such as \\ud800, "
                "or nesting deeper than the parser takes); nothing was run",
            )
            reply = JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
            await self._replies.send(SessionMessage(reply))

    def __aiter__(self) -> "StdioRequests":
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


def _unparsed_request_id(item: object) -> int | str | None:
    """The id of the request whose line failed to parse as `item`, or None."""
    if not isinstance(item, ValidationError):
        return None
    unparsed = (error["input"] for error in item.errors() if error["type"] == "json_invalid")
    line = next(unparsed, None)
    try:
        message = json.loads(line) if isinstance(line, str) else None
    except (ValueError, RecursionError):  # too deep even for Python: no id to answer
        return None
    if not isinstance(message, dict) or "method" not in message:
        return None
    request_id = message.get("id")
    is_id = isinstance(request_id, int | str) and not isinstance(request_id, bool)
    return request_id if is_id else None


class _Refused(ToolError):
    """Arguments refused before validation."""


def _refuse_arguments(name: str, arguments: dict[str, Any], known: dict[str, Any]) -> None:
    """Refuse text that is not Unicode, and an argument the tool does not take: validation
    would drop it, so a misspelt filter (`channel` for `channel_ids`) would give unfiltered
    results that look filtered."""
    broken = [key for key, value in arguments.items() if _has_surrogate(value)]
    if broken:
        raise _Refused(f"{name}: {', '.join(broken)} is not valid Unicode (lone surrogate)")
    unknown = [key for key in arguments if key not in known]
    if unknown:
        raise _Refused(
            f"invalid arguments for {name}: unknown argument "
            f"{', '.join(map(quoted, unknown))} (it takes {', '.join(known)})"
        )


class ServerBusy(SlackqueryError):
    """As many calls as `serve_max_in_flight` allows are running already."""


class ToolRunner:
    """Runs engine calls on worker threads within the in-flight cap and the time budget;
    records each (`record_call`)."""

    def __init__(
        self, settings: Settings, metrics: Metrics, clock: Callable[[], float] = time.monotonic
    ):
        self.budget_s = settings.serve_request_budget_s
        self.clock = clock
        self.max_in_flight = settings.serve_max_in_flight
        self.metrics = metrics
        self.in_flight = 0
        self._last_fault: str | None = None

    async def run(self, tool: str, mode: str, call: Callable[[Deadline], T]) -> T:
        """`call(deadline)` on a worker thread; every failure becomes a one-line ToolError."""
        started = time.perf_counter()
        try:
            result = await self._call(call)
        except Exception as error:
            failure, message = self._failure(tool, error)
            self._finished(tool, mode, started, failure)
            raise ToolError(message) from None
        self._finished(tool, mode, started, None)
        artifact_id = getattr(result, "artifact_id", None)
        if artifact_id:
            self.metrics.artifact_id = artifact_id
        return result

    async def _call(self, call: Callable[[Deadline], T]) -> T:
        if self.in_flight >= self.max_in_flight:
            raise ServerBusy(
                f"server busy: {self.max_in_flight} call(s) running already; retry shortly"
            )
        self.in_flight += 1
        deadline = Deadline(self.budget_s, self.clock)
        try:
            return await anyio.to_thread.run_sync(partial(self._started, call, deadline))
        finally:
            self.in_flight -= 1

    @staticmethod
    def _started(call: Callable[[Deadline], T], deadline: Deadline) -> T:
        deadline.check("it started (it waited for a worker thread)")
        return call(deadline)

    def _failure(self, tool: str, error: Exception) -> tuple[str, str]:
        """The failure kind (`metrics.FAILURE_KINDS`) and the requester's one line. Called
        while `error` is handled, so a bug's traceback is logged (`_internal_error`)."""
        if isinstance(error, ServerBusy):
            return "busy", str(error)
        if isinstance(error, SERVER_FAULTS):
            self._log_fault(tool, error)
            return "unavailable", one_line(f"{public_reason(error)}; see the server log")
        if isinstance(error, BudgetExceeded):
            return "timeout", one_line(str(error))
        if isinstance(error, SlackqueryError):
            return "refused", one_line(str(error))
        return "internal", str(_internal_error(tool))

    def _log_fault(self, tool: str, error: Exception) -> None:
        """The operator's reason for a server fault, once while it lasts: every call meets
        it until the operator acts, and one line per call would bury everything else."""
        if str(error) != self._last_fault:
            self._last_fault = str(error)
            logger.warning("%s cannot answer: %s", tool, error)

    def _finished(self, tool: str, mode: str, started: float, failure: str | None) -> None:
        record_call(self.metrics, tool, mode, time.perf_counter() - started, failure)


def record_call(
    metrics: Metrics, tool: str, mode: str, seconds: float, failure: str | None
) -> None:
    """Count one finished call and log its access line: who, which tool, the outcome and the
    time, never the arguments (they hold what requesters asked)."""
    metrics.observe(tool, mode, seconds, failure=failure)
    requester = current_requester.get()
    who = "operator" if requester is None else f"{requester.workspace_id}:{requester.user_id}"
    access_log.info("%s %s mode=%s %s %.1f ms", who, tool, mode, failure or "ok", seconds * 1e3)


def register_tools(server: MCPServer, engine: SearchEngine, runner: ToolRunner) -> None:
    """Add search_slack, get_slack_message, get_slack_thread and list_slack_scopes."""
    settings = engine.settings
    max_chars = settings.serve_max_response_chars
    values = filter_values(settings)
    max_query_chars = settings.search_max_query_chars
    max_results = settings.search_max_results

    async def search_slack(
        query: described(
            text_of_at_most(max_query_chars),
            f"What to find, at most {max_query_chars} characters; Slack search syntax works "
            '(in:#eng from:@priya after:2024-01-31 "exact phrase" -word).',
        ),
        mode: described(
            Literal["hybrid", "lexical", "semantic"],
            "hybrid (default): words and meaning; lexical: exact words, ids, error codes; "
            "semantic: meaning only.",
        ) = "hybrid",
        workspace_ids: described(values, WORKSPACE_FILTER) = None,
        channel_ids: described(values, CHANNEL_FILTER) = None,
        author_ids: described(values, AUTHOR_FILTER) = None,
        conversation_types: ConversationTypes = None,
        start_ts_us: StartTsUs = None,
        end_ts_us: EndTsUs = None,
        limit: page_size("Results", max_results, 10) = 10,
        cursor: next_page("query, mode and filters") = None,
    ) -> SearchResponse:
        """Search Slack messages. Start here to look up words, ids or topics, or to browse a
        channel, a person or a day; to answer a question from Slack with citations, use
        answer_slack_question instead.

        mode: "hybrid" (default; best for most questions), "lexical" (exact words, error
        codes, ids, URLs, file names, quoted text), "semantic" (paraphrases, concepts).
        query (at most {max_query_chars} chars; its first {max_query_tokens} distinct words count)
        may contain Slack search syntax: `in:#channel`, `from:@user`, `before:YYYY-MM-DD`,
        `after:`, `on:`, `during:YYYY-MM` or `during:YYYY`, `is:thread`, `has:link`,
        "exact phrase" (must appear verbatim) and `-word` or `-"phrase"` (leaves out the
        messages that hold it). Dates are UTC days: `before:` and `after:` exclude the day
        they name (`after:2024-03-01` starts on 2024-03-02), `on:` and `during:` include
        theirs. In hybrid mode a #channel or a day the question names in words ("on Sep
        28", "Sep 14-18") ranks that scope's messages up without filtering, and a question
        about how things stand now ("currently", "still") ranks the newest of the best
        matches up; notes say what was read. Operators or filters alone ("in:#eng
        on:yesterday", or "" with channel_ids) list the messages they keep, newest first
        (route "newest"), for catching up on a channel, a person or a day.
        Filters (each list at most {max_filter_values} values of at most {max_filter_value_chars}
        chars) narrow every arm before ranking: workspace_ids (ids, slugs or names),
        channel_ids (ids or names like "#eng"), author_ids (ids or names like "@priya"),
        conversation_types, start_ts_us/end_ts_us (inclusive, microseconds since epoch UTC).
        Narrow with filters before raising limit.
        limit: 1-{max_results} results per page (fewer, with a note, where their JSON would
        pass {max_response_chars:,} characters). cursor: the previous page's next_cursor, with
        the same query, mode and filters.
        Returns hits with ids, channel, author, ISO timestamp, thread id, text, permalink,
        attached files (name, title), each arm's rank/score and the fused score (ranking
        signals, not probabilities), plus next_cursor and vector_coverage: the share of
        messages semantic ranking reaches (below 1 while embedding runs; lexical search
        reaches every message). Results show at most 3 messages of a thread (a note names
        the threads with more). Zero results do not prove something was never said.
        A call that takes over {budget_s:g} s ends with an error; errors are one line.
        """
        request = SearchRequest(
            query=query,
            mode=mode,
            workspace_ids=workspace_ids,
            channel_ids=channel_ids,
            author_ids=author_ids,
            conversation_types=list(conversation_types) if conversation_types else None,
            start_ts_us=start_ts_us,
            end_ts_us=end_ts_us,
            limit=limit,
            cursor=cursor,
        )
        requester = current_requester.get()
        return await runner.run(
            "search_slack",
            mode,
            lambda deadline: engine.search(
                request, deadline=deadline, requester=requester, max_chars=max_chars
            ),
        )

    async def get_slack_message(
        document_id: described(
            str,
            "A search hit's document_id (W:C:ts) or a Slack permalink, also as an answer cites "
            "them: [W:C:ts], <permalink> or <permalink|label>.",
        ),
        context_before: described(
            ranged(0, MAX_CONTEXT_MESSAGES),
            f"Earlier neighbours to include, 0-{MAX_CONTEXT_MESSAGES} (with context_after at "
            f"most {MAX_CONTEXT_MESSAGES} in all). Default: 0.",
        ) = 0,
        context_after: described(
            ranged(0, MAX_CONTEXT_MESSAGES),
            f"Later neighbours to include, 0-{MAX_CONTEXT_MESSAGES} (with context_before at "
            f"most {MAX_CONTEXT_MESSAGES} in all). Default: 0.",
        ) = 0,
    ) -> MessageResponse:
        """Read one message and its neighbours, in time order, as Slack shows them.

        document_id: a search hit's document_id (`W:C:ts`) or a Slack permalink URL; a
        citation copied from an answer (`[W:C:ts]`, `<permalink|label>`) works too.
        context_before / context_after: earlier / later neighbours to include (each >= 0,
        together at most {max_context}): for a reply, the other messages of its thread; else
        the channel's messages outside threads and the replies also sent to the channel.
        The farthest are left out, with a note, where the JSON would pass
        {max_response_chars:,} characters. Use this to see what surrounded a hit;
        use get_slack_thread for the replies of a thread.
        """
        requester = current_requester.get()
        return await runner.run(
            "get_slack_message",
            "-",
            lambda deadline: engine.get_message(
                cited_target(document_id),
                context_before,
                context_after,
                requester=requester,
                max_chars=max_chars,
            ),
        )

    async def get_slack_thread(
        thread_id: described(
            str,
            "A hit's thread_id or thread_root_id (W:C:ts), or the document_id or permalink of "
            "any message in the thread, also as an answer cites them ([W:C:ts], <permalink>).",
        ),
        limit: page_size("Messages", MAX_THREAD_LIMIT, 200) = 200,
        cursor: next_page("thread_id") = None,
    ) -> ThreadResponse:
        """Read a whole thread (root and replies) in time order.

        thread_id: a hit's thread_id (`W:C:thread_ts`); a message id or permalink of any
        message in the thread also works, and so does a hit's thread_root_id: a message
        with no replies reads as a thread of its own, with a note.
        limit: 1-{max_thread} messages a page (default 200; a page ends early where its JSON
        would pass {max_response_chars:,} characters); `truncated` says when more follow,
        and passing `next_cursor` back as cursor (same thread_id) reads them. Expand only
        threads that look relevant.
        """
        requester = current_requester.get()
        return await runner.run(
            "get_slack_thread",
            "-",
            lambda deadline: engine.get_thread(
                cited_target(thread_id),
                limit,
                requester=requester,
                cursor=cursor,
                max_chars=max_chars,
            ),
        )

    async def list_slack_scopes(
        workspace_id: described(
            OptionalText, "Only this workspace: id, slug or name. Default: all."
        ) = None,
        channel_name: described(
            OptionalText,
            "Only this channel: its exact name, with or without #, any case. Default: all.",
        ) = None,
        limit: page_size("Channels", MAX_SCOPE_LIMIT, 200) = 200,
        cursor: next_page("filters") = None,
    ) -> ScopesResponse:
        """List workspaces and channels with message counts and first/last message times.

        Use it to find the ids and names that search_slack filters take, or to learn
        which time range the archive covers. workspace_id: id, slug or name to narrow to;
        channel_name: exact name, with or without `#` (case-insensitive). limit:
        1-{max_scopes} a page (fewer past {max_response_chars:,} characters of JSON);
        `truncated` says when more follow, and passing `next_cursor` back as cursor (same
        filters) lists them.
        """
        requester = current_requester.get()
        return await runner.run(
            "list_slack_scopes",
            "-",
            lambda deadline: engine.list_scopes(
                workspace_id,
                channel_name,
                limit,
                requester=requester,
                cursor=cursor,
                max_chars=max_chars,
            ),
        )

    limits = tool_limits(settings)
    for tool in (search_slack, get_slack_message, get_slack_thread, list_slack_scopes):
        description = inspect.cleandoc(tool.__doc__ or "").format(**limits)
        server.add_tool(tool, description=description, structured_output=True)


def cited_target(value: str) -> str:
    """The id or permalink a citation copied from an answer names, read as verify_citations
    reads citations: `[W:C:ts]` is the id inside the brackets, `<permalink>` and
    `<permalink|label>` (Slack's link form) are the URL; anything else is taken as given."""
    target = value.strip()
    bracketed = BRACKETED_CITATION.fullmatch(target)
    if bracketed:
        target = bracketed.group(1)
    in_angles = target.startswith("<") and target.endswith(">")
    linked = URL_IN_TEXT.match(target, 1) if in_angles else None
    return linked.group(0) if linked else target


def tool_limits(settings: Settings) -> dict[str, float]:
    """The numbers the tool descriptions state, from the settings and limits that enforce them."""
    return {
        "max_query_chars": settings.search_max_query_chars,
        "max_query_tokens": settings.search_max_query_tokens,
        "max_filter_values": settings.search_max_filter_values,
        "max_filter_value_chars": MAX_FILTER_VALUE_CHARS,
        "max_results": settings.search_max_results,
        "max_context": MAX_CONTEXT_MESSAGES,
        "max_thread": MAX_THREAD_LIMIT,
        "max_scopes": MAX_SCOPE_LIMIT,
        "budget_s": settings.serve_request_budget_s,
        "max_response_chars": settings.serve_max_response_chars,
    }
