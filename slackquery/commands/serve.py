"""`slackquery serve [--stdio]`: run the MCP server over Streamable HTTP or stdio."""

import argparse

from slackquery.commands import add_requester_flags, requester_from, with_kept_cursor_key
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `serve` subcommand."""
    parser = subparsers.add_parser(
        "serve",
        help="run the MCP server (Streamable HTTP, or stdio for desktop clients)",
        description="Serve the published artifact to MCP clients. By default Streamable HTTP "
        "at http://SLACKQUERY_SERVE_HOST:SLACKQUERY_SERVE_PORT/mcp (127.0.0.1:8181) with "
        "/healthz, /readyz and /metrics; set SLACKQUERY_SERVE_TOKEN to require a bearer "
        "token (and `slackquery access grant` for per-user tokens). --stdio speaks MCP on "
        "stdin/stdout for desktop clients that launch the server themselves, as the local "
        "operator or, with --as, as one Slack user. A newly published artifact is picked "
        "up without restart.",
    )
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout")
    parser.add_argument("--host", help="bind address (default: SLACKQUERY_SERVE_HOST)")
    parser.add_argument(
        "--port", type=tcp_port, help="TCP port, 1-65535 (default: SLACKQUERY_SERVE_PORT)"
    )
    add_requester_flags(parser)
    parser.set_defaults(handler=run)


def tcp_port(value: str) -> int:
    """An argparse type: a port to listen on. 0 ("any free port") is refused: clients are
    registered with the server's URL, so the port must be known before it starts."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port: use 1-65535")
    return port


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run until interrupted; a host or port it cannot listen on is a one-line error."""
    # Imported here, not at the top: the MCP SDK would cost every CLI start ~0.3 s.
    from serving.server import run_http, run_stdio

    if (args.as_user or args.as_workspace is not None or args.as_no_dms) and not args.stdio:
        args.requester_usage_error(
            "--as (and --as-workspace, --as-no-dms) applies to --stdio; over HTTP each token "
            "names its requester"
        )
    # The home's cursor key, as `search` and `thread` use: a cursor outlives a restart, and
    # one the CLI printed works over MCP too.
    settings = with_kept_cursor_key(settings)
    if args.stdio:
        run_stdio(settings, requester_from(args, settings))
    else:
        run_http(settings, args.host, args.port)
    return 0
