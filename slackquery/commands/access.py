"""`slackquery access grant|list|revoke`: requester tokens for the MCP server."""

import argparse
from datetime import UTC, datetime

from serving.access import published_account_limits, published_requester, published_user_name
from slackquery.access.grants import LABEL_MAX_CHARS, GrantStore, check_label, grants_path
from slackquery.commands import add_json_flag, emit, iso_day
from slackquery.escaping import terminal_line
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `access` subcommand and its three actions."""
    parser = subparsers.add_parser(
        "access",
        help="grant, list and revoke requester tokens for the MCP server",
        description="Each grant is a token for one Slack user of one workspace: over HTTP "
        "that requester sees public channels of their workspace and the private channels, "
        "DMs and group DMs they are a member of. Once any grant exists, /mcp needs a granted "
        "token or the admin token (SLACKQUERY_SERVE_TOKEN). Only a hash of each token is "
        "kept, under SLACKQUERY_HOME/access/.",
    )
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    grant = actions.add_parser(
        "grant",
        help="create a token for one Slack user; shown once",
        description="Create a token for one Slack user of the published artifact and print "
        "it once; only its sha256 is kept.",
    )
    grant.add_argument("--user", required=True, help="Slack user id (U…), @name or name")
    grant.add_argument("--workspace", help="workspace id, slug or name (when ambiguous)")
    grant.add_argument(
        "--label",
        help=f"a unique name for the grant: 1 to {LABEL_MAX_CHARS} printable characters on one "
        "line, not shaped like a grant id (g_…) (default: WORKSPACE_ID:USER_ID)",
    )
    grant.add_argument("--no-dms", action="store_true", help="never show DMs or group DMs")
    grant.add_argument(
        "--expires", type=iso_day, metavar="YYYY-MM-DD", help="last day (UTC) the token works"
    )
    add_json_flag(grant)
    grant.set_defaults(handler=run_grant)
    listing = actions.add_parser(
        "list",
        help="list grants (never their tokens)",
        description="List every grant with its state (active, revoked, expired); tokens "
        "are never shown.",
    )
    add_json_flag(listing)
    listing.set_defaults(handler=run_list)
    revoke = actions.add_parser(
        "revoke",
        help="end one grant now (by label or id)",
        description="End one grant; a running server refuses its token from the next request.",
    )
    revoke.add_argument(
        "grant", metavar="LABEL_OR_ID", help="the grant's label or id (see `access list`)"
    )
    revoke.add_argument(
        "--id",
        dest="by_id",
        action="store_true",
        help="LABEL_OR_ID is a grant id; labels are not searched",
    )
    add_json_flag(revoke)
    revoke.set_defaults(handler=run_revoke)


def run_grant(args: argparse.Namespace, settings: Settings) -> int:
    """Resolve the user against the published artifact, store the grant, print the token."""
    expires = args.expires.isoformat() if args.expires else None
    if args.label is not None:
        check_label(args.label)  # before the artifact is read
    requester = published_requester(
        settings, args.user, args.workspace, args.no_dms, active_only=True
    )
    # Before the grant is stored: one whose token was never shown must not exist.
    name = published_user_name(settings, requester)
    user = f"{requester.workspace_id}:{requester.user_id}"
    # `--label ""` is refused above, not taken for the default: the user it names.
    label = user if args.label is None else args.label
    grant, token = GrantStore(grants_path(settings)).add(
        user_id=requester.user_id,
        workspace_id=requester.workspace_id,
        label=label,
        no_dms=args.no_dms,
        expires=expires,
        now=datetime.now(UTC),
    )
    result = {**grant.public(datetime.now(UTC)), "user_name": name, "token": token}
    granted = terminal_line(
        f"granted {grant.grant_id} to {f'{name} ({user})' if name else user}"
        f"{f', label {grant.label}' if grant.label != user else ''}"
        f"{', no DMs' if grant.no_dms else ''}"
        f"{f', until {grant.expires}' if grant.expires else ''}"
    )
    emit(args, result, f"{granted}\ntoken (shown once): {token}")
    return 0


_LIMIT_NOTES = {
    "deactivated": "  deactivated in Slack (sees nothing)",
    "guest": "  guest (only the conversations it is a member of)",
}


def run_list(args: argparse.Namespace, settings: Settings) -> int:
    """Every grant with its state; tokens are never stored, so never shown. A label
    written before labels were checked may hold anything: each row is escaped to one line."""
    now = datetime.now(UTC)
    grants = [grant.public(now) for grant in GrantStore(grants_path(settings)).grants()]
    # A grant outlives its user's full account: say what such a token sees now.
    limits = published_account_limits(settings) if grants else {}
    for row in grants:
        row["account_limit"] = limits.get((row["workspace_id"], row["user_id"]))
    lines = [
        terminal_line(
            f"{row['grant_id']}  {row['label']}  {row['workspace_id']}:{row['user_id']}  "
            f"{'active' if row['active'] else 'revoked' if row['revoked_at'] else 'expired'}"
            f"{_LIMIT_NOTES.get(row['account_limit'], '')}"
            f"{'  no-dms' if row['no_dms'] else ''}"
            f"{'  until ' + str(row['expires']) if row['expires'] else ''}"
        )
        for row in grants
    ]
    emit(args, {"grants": grants}, "\n".join(lines) or "no grants")
    return 0


def run_revoke(args: argparse.Namespace, settings: Settings) -> int:
    """Revoke one grant; a running server refuses its token from the next request on."""
    now = datetime.now(UTC)
    grant = GrantStore(grants_path(settings)).revoke(args.grant, now, by_id=args.by_id)
    emit(args, grant.public(now), terminal_line(f"revoked {grant.label} ({grant.grant_id})"))
    return 0
