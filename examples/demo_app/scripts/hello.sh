#!/bin/sh
# SCRIPT job: scriptCommandLine "scripts/hello.sh". The sharding context arrives as one JSON
# argument ($1) and as EJC_* environment variables.
echo "hello from ${EJC_JOB_NAME} shard ${EJC_SHARDING_ITEM}/${EJC_SHARDING_TOTAL_COUNT}: $1"
if [ "${EJC_JOB_PARAMETER}" = "fail" ]; then
    echo "shard ${EJC_SHARDING_ITEM} was asked to fail" >&2
    exit 3
fi
