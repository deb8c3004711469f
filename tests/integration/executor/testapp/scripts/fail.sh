#!/bin/sh
echo "script failing" >&2
exit 3
