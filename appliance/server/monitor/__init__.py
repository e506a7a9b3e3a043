"""Monitoring (`http_port` / `-m`): nats-server's /varz /connz /subsz /healthz over a read-only view.

Use: `server = MonitorServer(MonitorApp(view), listener); await server.start()`, where `view`
implements `view.ServerView` and `listener` is the listening socket the supervisor opened. The same
documents answer system-account requests: `MonitorApp.system_reply(name, body, seq=...)` for the
subjects `system.system_subjects(server_id)` lists.
"""

from .app import ENDPOINTS, MonitorApp
from .http import MonitorServer

__all__ = ["ENDPOINTS", "MonitorApp", "MonitorServer"]
