"""Monitoring HTTP (`http_port` / `-m`): nats-server's /varz /connz /subsz /healthz over a read-only view.

Use: `server = MonitorServer(MonitorApp(view), listener); await server.start()`, where `view`
implements `view.ServerView` and `listener` is the listening socket the supervisor opened.
"""

from .app import ENDPOINTS, MonitorApp
from .http import MonitorServer

__all__ = ["ENDPOINTS", "MonitorApp", "MonitorServer"]
