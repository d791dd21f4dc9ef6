"""The Headwater Kubernetes operator (kopf): Topic and ConsumerGroup custom resources.

Layout:

    model.py     pure logic — spec -> desired state, observed -> plan, status conditions
    config.py    OperatorConfig (the command line's settings) and kopf settings
    failures.py  Headwater errors -> kopf.TemporaryError (backoff) / kopf.PermanentError
    cluster.py   the one place that talks to Headwater (AsyncAdminClient): observe / apply
    topics.py    Topic handlers: create/update/resume, drift timer, delete (finalizer)
    groups.py    ConsumerGroup handlers: status (lag) timer, declarative offset reset
    __main__.py  ``python -m headwater_operator --bootstrap HOST:PORT [--namespace NS ...]``

See docs/kubernetes.md (the operator section) for what happens on each change.
"""

from headwater_operator.config import OperatorConfig
from headwater_operator.registry import build_registry

__all__ = ["OperatorConfig", "build_registry"]
