"""The edge of a replica (layer 4a): what faces HTTP clients on every replica, leader or not.

The hardened WSGI server (`wsgiserver`), the HTTP face in front of it (`http`: Host allow-list,
trusted proxies, `/health`, `/metrics`, the console, `/api` routing), Basic auth
(`authenticator`), the console's session tokens (`sessions`), the web console (`console/`) and
the Prometheus collectors (`metrics`). It imports no replica, API or wiring module.
"""
