"""The four MCP tools. Their docstrings are the contract an agent reads to pick a tool.

Each tool runs the engine on a worker thread (ranking is numpy and DuckDB work that would
otherwise block the event loop), records metrics, and turns every user-facing failure into
a one-line tool error: agents get a message they can act on, never a traceback.
"""

import time
from collections.abc import Callable
from functools import partial
from typing import Literal, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from serving.access import current_requester
from serving.engine import SearchEngine
from serving.metrics import Metrics
from serving.models import (
    MessageResponse,
    ScopesResponse,
    SearchRequest,
    SearchResponse,
    ThreadResponse,
)
from slackquery.errors import SlackqueryError

T = TypeVar("T")


async def _run(metrics: Metrics, tool: str, mode: str, call: Callable[[], T]) -> T:
    started = time.perf_counter()
    try:
        result = await anyio.to_thread.run_sync(call)
    except SlackqueryError as error:
        metrics.observe(tool, mode, time.perf_counter() - started, error=True)
        raise ToolError(str(error)) from None
    except Exception:
        metrics.observe(tool, mode, time.perf_counter() - started, error=True)
        raise
    metrics.observe(tool, mode, time.perf_counter() - started, error=False)
    artifact_id = getattr(result, "artifact_id", None)
    if artifact_id:
        metrics.artifact_id = artifact_id
    return result


def register_tools(server: MCPServer, engine: SearchEngine, metrics: Metrics) -> None:
    """Add search_slack, get_slack_message, get_slack_thread and list_slack_scopes."""

    async def search_slack(
        query: str,
        mode: Literal["hybrid", "lexical", "semantic"] = "hybrid",
        workspace_ids: list[str] | None = None,
        channel_ids: list[str] | None = None,
        author_ids: list[str] | None = None,
        conversation_types: list[Literal["public", "private", "dm", "group_dm"]] | None = None,
        start_ts_us: int | None = None,
        end_ts_us: int | None = None,
        limit: int = 10,
        cursor: str | None = None,
    ) -> SearchResponse:
        """Search Slack messages. Start here for any question about what was said in Slack.

        mode: "hybrid" (default; best for most questions), "lexical" (exact words, error
        codes, ids, URLs, file names, quoted text), "semantic" (paraphrases, concepts).
        query (1-2000 chars) may contain Slack search syntax: `in:#channel`, `from:@user`,
        `before:YYYY-MM-DD`, `after:`, `on:`, `during:YYYY-MM`, `is:thread`, `has:link`
        and "exact phrase" (must appear verbatim).
        Filters (each list at most 100 values) narrow every arm before ranking:
        workspace_ids (ids or slugs), channel_ids (ids or names like "#eng"), author_ids
        (ids or names like "@priya"), conversation_types, start_ts_us/end_ts_us (inclusive,
        microseconds since epoch UTC). Narrow with filters before raising limit.
        limit: 1-50 results per page. cursor: the previous page's next_cursor, with the
        same query, mode and filters.
        Returns hits with ids, channel, author, ISO timestamp, thread id, text, permalink,
        each arm's rank/score and the fused score (ranking signals, not probabilities),
        plus next_cursor. Zero results do not prove something was never said.
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
        call = partial(engine.search, request, requester=current_requester.get())
        return await _run(metrics, "search_slack", mode, call)

    async def get_slack_message(
        document_id: str, context_before: int = 0, context_after: int = 0
    ) -> MessageResponse:
        """Read one message and its neighbours in the same channel, in time order.

        document_id: a search hit's document_id (`W:C:ts`) or a Slack permalink URL.
        context_before / context_after: earlier / later messages of the same channel to
        include (each >= 0, together at most 100). Use this to see what surrounded a hit;
        use get_slack_thread for the replies of a thread.
        """
        call = partial(
            engine.get_message,
            document_id,
            context_before,
            context_after,
            requester=current_requester.get(),
        )
        return await _run(metrics, "get_slack_message", "-", call)

    async def get_slack_thread(thread_id: str, limit: int = 200) -> ThreadResponse:
        """Read a whole thread (root and replies) in time order.

        thread_id: a hit's thread_id (`W:C:thread_ts`); a message id or permalink of any
        message in the thread also works. limit: 1-500 messages (default 200);
        `truncated` says when the thread has more. Expand only threads that look relevant.
        """
        call = partial(engine.get_thread, thread_id, limit, requester=current_requester.get())
        return await _run(metrics, "get_slack_thread", "-", call)

    async def list_slack_scopes(
        workspace_id: str | None = None, channel_name: str | None = None, limit: int = 200
    ) -> ScopesResponse:
        """List workspaces and channels with message counts and first/last message times.

        Use it to find the ids and names that search_slack filters take, or to learn
        which time range the archive covers. workspace_id: id or slug to narrow to;
        channel_name: exact name, with or without `#` (case-insensitive). limit: 1-500.
        """
        call = partial(
            engine.list_scopes, workspace_id, channel_name, limit, requester=current_requester.get()
        )
        return await _run(metrics, "list_slack_scopes", "-", call)

    for tool in (search_slack, get_slack_message, get_slack_thread, list_slack_scopes):
        server.add_tool(tool, structured_output=True)
