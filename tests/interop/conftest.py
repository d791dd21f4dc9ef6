"""Fixtures for the interop tests; helpers live in ``interop_util``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest


@pytest.fixture
def broker_channel(cluster: Any) -> Iterator[grpc.Channel]:
    """A plain channel to the cluster's bootstrap broker (no Headwater client involved)."""
    with grpc.insecure_channel(cluster.bootstrap) as channel:
        yield channel
