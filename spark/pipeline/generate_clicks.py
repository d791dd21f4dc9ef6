"""Clickstream generator: JSON click events into a Headwater topic.

Each event is ``{"user": "u17", "page": "/pricing", "ts": <event time, ms>}`` keyed by the
user. Event times start ``--start-minutes-ago`` minutes in the past and advance by
``--step-ms`` per event, so a run covers a known span of event time (deterministic with
``--seed``).

    python spark/pipeline/generate_clicks.py --bootstrap 127.0.0.1:9092 --events 20000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import time
from typing import Any

from headwater.client import AdminClient, Producer
from headwater.errors import TopicAlreadyExistsError

PAGES = ["/", "/pricing", "/docs", "/blog", "/signup", "/login"]


def events(n: int, *, start_ms: int, step_ms: int, users: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    return [
        {
            "user": f"u{rnd.randrange(users)}",
            "page": rnd.choice(PAGES),
            "ts": start_ms + i * step_ms,
        }
        for i in range(n)
    ]


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    with AdminClient(bootstrap) as admin, contextlib.suppress(TopicAlreadyExistsError):
        admin.create_topic(topic, partitions, 1)


def produce(bootstrap: str, topic: str, evs: list[dict[str, Any]]) -> None:
    with Producer(bootstrap, acks="all") as producer:
        for e in evs:
            producer.send(topic, json.dumps(e).encode(), str(e["user"]).encode())
        producer.flush()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--users", type=int, default=500)
    ap.add_argument("--step-ms", type=int, default=10)
    ap.add_argument("--start-minutes-ago", type=int, default=10)
    ap.add_argument("--seed", type=int, default=8)
    args = ap.parse_args(argv)
    ensure_topic(args.bootstrap, args.topic, args.partitions)
    start = int(time.time() * 1000) - args.start_minutes_ago * 60_000
    evs = events(
        args.events, start_ms=start, step_ms=args.step_ms, users=args.users, seed=args.seed
    )
    produce(args.bootstrap, args.topic, evs)
    print(f"produced {len(evs)} click events to {args.topic}")


if __name__ == "__main__":
    main()
