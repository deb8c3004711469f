"""Access control's models: roles, principals, grants, tokens and a caller's rights. No I/O.

The app is the unit of ownership (issue 26). A grant gives a principal a role on one app or on
every app (`ANY_APP`). Roles are ordered, each including the ones below it:

    viewer < operator < editor < app-admin < cluster-admin

`cluster-admin` is cluster-wide whatever app its grant names. The settings' admin account is
`cluster-admin` on every app and its guest account `viewer` on every app, as they always were.

Modules: `roles` (Role, Grant, Rights, Principal), `tokens` (the `ejc_<id>_<secret>` format,
its generation and its digest), `records` (the stored user, grant and token records, their
JSON and their checks), `directory` (an in-memory index of the records a replica follows: whose
rights a request has, at the cost of a few dictionary lookups).
"""
