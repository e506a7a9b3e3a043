"""`/`: a small HTML page linking every endpoint served (nats-server serves a similar index)."""

from __future__ import annotations

import html

from .endpoint import Endpoint, RequestContext, Response

HTML_CONTENT_TYPE = "text/html; charset=utf-8"


def handle(ctx: RequestContext) -> Response:
    ctx.count()
    view = ctx.view
    links = "\n".join(
        f'    <a href=".{html.escape(e.paths[0])}">{html.escape(e.title)}'
        f' <span class="endpoint">{html.escape(e.paths[0])}</span></a>'
        for e in ctx.endpoints
        if e.paths[0] != "/"
    )
    page = f"""<html lang="en">
  <head>
    <title>{html.escape(view.server_name)}</title>
    <style type="text/css">
      body {{ font-family: ui-sans-serif, system-ui, sans-serif; margin-left: 32px }}
      a {{ display: block; padding-bottom: 6px; color: rgb(72 72 92); text-decoration: none }}
      .endpoint {{ font-size: 12px; color: #999; font-family: monospace }}
    </style>
  </head>
  <body>
    <h2>appliance v{html.escape(view.version)}</h2>
{links}
  </body>
</html>
"""
    return Response(200, (("Content-Type", HTML_CONTENT_TYPE),), page.encode())


ENDPOINT = Endpoint(paths=("/",), handle=handle, title="Index")
