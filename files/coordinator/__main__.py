"""``python -m coordinator`` (run from ``files/``): check the configuration and backends,
create or upgrade the schema, then serve the API with uvicorn (uvloop, httptools)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

import uvicorn

from . import __version__
from .app import create_app
from .config import ConfigError, load_config
from .errors import StartupError
from .service import preflight


def main() -> int:
    try:
        cfg = load_config(os.environ)
    except ConfigError as exc:
        print(f"coordinator: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=cfg.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(preflight(cfg))
    except StartupError as exc:
        print(f"coordinator: {exc}", file=sys.stderr)
        return 1
    logging.getLogger("coordinator").info(
        "coordinator %s listening on %s:%s", __version__, cfg.bind, cfg.port)
    uvicorn.run(
        create_app(cfg), host=cfg.bind, port=cfg.port, loop="uvloop", http="httptools",
        access_log=False, server_header=False, log_config=None, backlog=4096,
        timeout_keep_alive=30, proxy_headers=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
