"""The replica (layer 4b): its ZooKeeper session, the election, each term and its record.

`replica` (the election loop, the ZooKeeper client and its watchdog), `term` (a term, its fence
and the context its components get), `terms_log` (the term's record at `/ha/terms`) and
`vouching` (which election members it trusts). It may import the edge (4a), never the API or
the wiring.
"""
