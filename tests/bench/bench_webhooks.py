"""Webhook isolation benchmark: `--slow S` receivers answer one byte every 4 s (each holds a
sender until the whole-request deadline), while `--events N` failure events go to one healthy
receiver. Prints the healthy receiver's delivery latency (notify to received) and how long the
slow attempts lasted; real HTTP servers on 127.0.0.1, the real notifier.

Run: `./dev.sh bench webhooks [--events N] [--slow S] [--senders K] [--deadline D]`.
"""

from __future__ import annotations

import argparse
import statistics
import time

from scheduler.leader.webhooks import WebhookNotifier
from scheduler.model.job_events import JobEvent, JobEventKind
from scheduler.model.net_targets import AllowList
from tests.support.webhook_receiver import Receiver, Trickler


def _event(url: str, n: int) -> JobEvent:
    return JobEvent(JobEventKind.RUN_FAILED, f"job{n}", time.time(), "bench", webhook_url=url)


def run(events: int, slow: int, senders: int, deadline_s: float) -> None:
    healthy = Receiver()
    tricklers = [Trickler(every_s=4.0) for _ in range(slow)]
    notifier = WebhookNotifier(
        "",
        allowed=AllowList.parse("127.0.0.1/32"),
        attempts=1,
        timeout_s=deadline_s,
        senders=senders,
    )
    notifier.start()
    try:
        began = time.monotonic()
        for n, trickler in enumerate(tricklers):
            notifier.notify(_event(trickler.url, n))
        sent: list[float] = []
        for n in range(events):
            sent.append(time.monotonic())
            notifier.notify(_event(healthy.url, n))
            time.sleep(0.01)  # a failure every 10 ms
        while len(healthy.times) < events and time.monotonic() - began < 120:
            time.sleep(0.05)
        while notifier.counts()["given_up"] < slow and time.monotonic() - began < 120:
            time.sleep(0.05)
        slow_s = time.monotonic() - began
    finally:
        notifier.stop()
        for trickler in tricklers:
            trickler.close()
        healthy.close()
    latencies_ms = sorted((got - at) * 1000 for at, got in zip(sent, healthy.times, strict=False))
    p50 = statistics.median(latencies_ms)
    p99 = latencies_ms[max(0, int(len(latencies_ms) * 0.99) - 1)]
    print(
        f"webhooks: {len(latencies_ms)}/{events} delivered to the healthy receiver beside {slow} "
        f"trickling ones ({senders} senders, deadline {deadline_s:g} s): latency p50 "
        f"{p50:.1f} ms, p99 {p99:.1f} ms, max {latencies_ms[-1]:.1f} ms; the slow attempts all "
        f"ended after {slow_s:.1f} s ({notifier.counts()})"
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench webhooks")
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--slow", type=int, default=3)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--deadline", type=float, default=10.0)
    args = parser.parse_args(argv)
    run(args.events, args.slow, args.senders, args.deadline)
