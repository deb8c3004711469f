#!/bin/sh
# Starts a child that sleeps, writes both pids, waits.
sleep 300 &
echo "$$ $!" > "$EJC_JOB_PARAMETER/$EJC_JOB_NAME-$EJC_SHARDING_ITEM.pid"
wait
