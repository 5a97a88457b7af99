"""`slackquery embed-server`: serve the packaged embedding model over HTTP on loopback.

Speaks the Ollama (`/api/embed`, `/api/tags`) and OpenAI (`/v1/embeddings`, `/v1/models`)
protocols plus `/health`, so `SLACKQUERY_EMBEDDING_TRANSPORT=ollama|openai` pointed at it
gives the same vectors as the in-process default. Inputs must carry the model's
`query: ` / `passage: ` prefix (see `slackquery.embedding.server`).
"""

import argparse
from urllib.parse import urlsplit

from slackquery.commands import whole_number
from slackquery.commands.serve import tcp_port
from slackquery.embedding.packaged import PACKAGED_MODELS
from slackquery.embedding.server import create_app, validate_api_key
from slackquery.errors import SlackqueryError
from slackquery.listening import is_loopback, listen_on
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `embed-server` subcommand."""
    parser = subparsers.add_parser(
        "embed-server",
        help="serve the packaged embedding model over HTTP (Ollama + OpenAI protocols)",
        description="Serve the packaged embedding model (SLACKQUERY_EMBEDDING_MODEL) over "
        "the Ollama /api/embed and OpenAI /v1/embeddings protocols, on loopback by default. "
        "Every input must start with the model's query or document prefix.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    parser.add_argument(
        "--port",
        type=tcp_port,
        default=None,
        help="TCP port, 1-65535 (default: the port of SLACKQUERY_EMBEDDING_URL, 11435)",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help="bearer key required on every route, at least 16 printable ASCII characters "
        "(default: SLACKQUERY_EMBEDDING_API_KEY; required off loopback)",
    )
    parser.add_argument(
        "--max-batch",
        type=whole_number(1),
        default=None,
        help="most inputs per request, at least 1 (over: 400; default: "
        "SLACKQUERY_EMBED_SERVER_MAX_BATCH, 256)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=whole_number(1024),  # the least SLACKQUERY_EMBED_SERVER_MAX_BODY_BYTES takes
        default=None,
        help="largest request body, at least 1,024, streamed bodies included (over: 413; default: "
        "SLACKQUERY_EMBED_SERVER_MAX_BODY_BYTES, 4 MiB)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Serve in the foreground until interrupted (exit 130, or 143 on SIGTERM, as every
    command); an address it cannot listen on is a one-line error."""
    import uvicorn

    model = PACKAGED_MODELS.get(settings.embedding_model)
    if model is None:
        raise SlackqueryError(
            f"embed-server serves packaged models only, not {settings.embedding_model!r} "
            f"(packaged: {', '.join(sorted(PACKAGED_MODELS))})"
        )
    api_key = args.api_key if args.api_key is not None else settings.embedding_api_key
    if api_key is not None:
        validate_api_key(api_key)
    elif not is_loopback(args.host):
        raise SlackqueryError(f"refusing to serve on {args.host} without --api-key")
    port = args.port or urlsplit(settings.embedding_url).port or 11435
    sockets = listen_on(args.host, port)
    try:
        app = create_app(
            model,
            api_key=api_key,
            max_batch=args.max_batch or settings.embed_server_max_batch,
            max_body_bytes=args.max_body_bytes or settings.embed_server_max_body_bytes,
        )
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    print(f"serving {model.name} on http://{args.host}:{port} (Ctrl-C stops)", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=sockets)
    return 0
