"""`python -m serving [--stdio] [--host H] [--port P]`: run the MCP server.

The same as `slackquery serve`; desktop MCP clients can launch either.
"""

import argparse

from serving.server import run_http, run_stdio
from slackquery.settings import get_settings


def main() -> None:
    """Parse the flags and run the chosen transport until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m serving", description=__doc__)
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout")
    parser.add_argument("--host", help="bind address (default: SLACKQUERY_SERVE_HOST)")
    parser.add_argument("--port", type=int, help="TCP port (default: SLACKQUERY_SERVE_PORT)")
    args = parser.parse_args()
    settings = get_settings()
    if args.stdio:
        run_stdio(settings)
    else:
        run_http(settings, args.host, args.port)


if __name__ == "__main__":
    main()
