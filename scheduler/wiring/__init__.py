"""The wiring (layer 4d): where a replica and a term are composed, and the command line.

`term` builds a term's components and ties them together; `command_line` turns argv, the
environment and a properties file into checked settings. `scheduler/__main__.py` runs them.
Nothing below imports this package.
"""
