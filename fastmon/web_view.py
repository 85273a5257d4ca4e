"""``fastmon watch --web``: the dashboard in a browser, served by textual-serve (one
``fastmon watch RUN`` process per browser tab, its screen streamed over a websocket).

textual-serve checks nobody: anyone who reached it could press ``a`` or ``q``. Here every
request needs the view's token, given once in the URL fastmon prints (``/?token=...``) and
kept by the browser in a strict same-site cookie; the websocket is refused to a page of
another origin (a site you visit cannot drive it through your browser). It listens on
localhost unless told otherwise; ``ssh -L`` brings it to your machine.
"""

from __future__ import annotations

import errno
import hmac
import secrets
import shlex
import socket
import sys

COOKIE = "fastmon_view"
DEFAULT_PORT = 8000
REFUSED = "fastmon: this view needs its token: open the URL fastmon printed (it ends in ?token=...)\n"


class NoWebServer(Exception):
    """textual-serve is not installed, or the address cannot be listened on: why, in words."""


def check_can_serve(host: str, port: int, port_option: str = "--port") -> None:
    """NoWebServer unless textual-serve is installed and ``host:port`` can be listened on
    now (checked before anything is printed or started)."""
    try:
        import textual_serve  # noqa: F401
    except ImportError as exc:
        raise NoWebServer(f"the dashboard in a browser needs textual-serve ({exc}): "
                          "pip install 'fastmon[web]'") from exc
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        hint = f"{port_option} names another" if exc.errno == errno.EADDRINUSE else "--host names another address"
        raise NoWebServer(f"cannot serve on {host}:{port} ({exc.strerror or exc}): {hint}") from exc


def serve(run_dir, runs_dir: str, host: str, port: int, say) -> None:
    """Serve ``fastmon watch RUN`` until Ctrl-C; ``say(line)`` tells the user where."""
    check_can_serve(host, port)
    from aiohttp import web
    from textual_serve.server import Server

    class GuardedServer(Server):
        """textual-serve's server with a token on every request and an origin check on the
        websocket."""

        def __init__(self, command: str, token: str) -> None:
            super().__init__(command, host=host, port=port, title="fastmon")
            self.token = token

        async def _make_app(self):
            app = await super()._make_app()
            app.middlewares.append(self.guard)
            return app

        async def on_startup(self, app) -> None:  # (textual-serve's prints its logo on stdout)
            pass

        @web.middleware
        async def guard(self, request, handler):
            given = request.query.get("token") or request.cookies.get(COOKIE) or ""
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return web.Response(status=403, text=REFUSED)
            if request.path.startswith("/ws") and request.headers.get("Origin") not in allowed_origins(request):
                return web.Response(status=403, text="fastmon: a page of another origin may not drive this view\n")
            response = await handler(request)
            if request.query.get("token"):
                response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict")
            return response

    token = secrets.token_urlsafe(24)
    command = shlex.join([sys.executable, "-m", "fastmon", "watch", "--runs-dir", runs_dir, str(run_dir)])
    server = GuardedServer(command, token)
    say(f"[fastmon] the dashboard of {run_dir} in a browser: {server.public_url}/?token={token}")
    if host in ("localhost", "127.0.0.1", "::1"):
        say(f"[fastmon] from another machine: ssh -L {port}:localhost:{port} THIS_HOST, then open that URL there")
    server.serve()


def allowed_origins(request) -> set[str]:
    """The page's own origin, as the browser names it: the host it asked for."""
    return {f"http://{request.host}", f"https://{request.host}"}
