"""``headwater.client`` imports its public names lazily (PEP 562 module ``__getattr__``):
importing the package loads no submodule, a name loads only its own module's imports, and
every name in ``__all__`` resolves to the object its defining module exports."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import headwater.client as client

HEAVY = (
    "headwater.client.consumer",
    "headwater.client.producer",
    "headwater.client.group",
    "headwater.client.fetcher",
)


def _loaded_after(code: str) -> list[str]:
    """The headwater.client.* modules loaded in a fresh interpreter after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('headwater.client'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def test_importing_the_package_loads_no_submodule() -> None:
    assert _loaded_after("import headwater.client") == ["headwater.client"]


def test_the_admin_client_does_not_load_consumer_producer_or_group() -> None:
    loaded = _loaded_after("from headwater.client import AdminClient, TopicPartition")
    assert "headwater.client.sync" in loaded and "headwater.client.admin" in loaded
    assert not [m for m in HEAVY if m in loaded], loaded


def test_a_name_loads_its_module_on_first_use() -> None:
    loaded = _loaded_after("import headwater.client as c\nc.Consumer")
    assert "headwater.client.sync" in loaded
    assert "headwater.client.consumer" not in loaded  # the facade imports it when made
    loaded = _loaded_after("import headwater.client as c\nc.AsyncProducer")
    assert "headwater.client.producer" in loaded


@pytest.mark.parametrize("name", client.__all__)
def test_every_public_name_resolves_to_its_modules_object(name: str) -> None:
    value = getattr(client, name)
    module = importlib.import_module(client._EXPORTS[name])
    assert value is getattr(module, name)
    assert name in dir(client)


def test_all_and_the_lazy_table_name_the_same_names() -> None:
    assert sorted(client.__all__) == sorted(client._EXPORTS)
    assert len(set(client.__all__)) == len(client.__all__)


def test_an_unknown_name_is_an_attribute_error_and_submodules_still_import() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = client.no_such_name  # type: ignore[attr-defined]
    from headwater.client import partitioner

    assert partitioner.murmur2 is client.murmur2
