"""The ``headwater`` command line: topics, produce, consume, bench, metadata, dev."""
