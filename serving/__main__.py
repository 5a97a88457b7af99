"""`python -m serving [--stdio] [--host H] [--port P] …`: run the MCP server.

Exactly `slackquery serve` (the same flags, checks and one-line errors); desktop MCP
clients can launch either.
"""

import sys

from slackquery import cli


def main() -> int:
    """Run `slackquery serve` with this command's arguments."""
    return cli.main(["serve", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
