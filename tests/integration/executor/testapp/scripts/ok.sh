#!/bin/sh
# Writes its argument and EJC_* variables to $EJC_JOB_PARAMETER/<job>-<item>.script
out="$EJC_JOB_PARAMETER/$EJC_JOB_NAME-$EJC_SHARDING_ITEM.script"
printf '%s\n' "$1" > "$out"
env | grep '^EJC_' | sort >> "$out"
echo "script ok $EJC_SHARDING_ITEM"
