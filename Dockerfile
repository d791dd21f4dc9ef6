# The Headwater services image: broker, controller (and later coordinator) share it; the
# command picks the service, e.g. `python -m services.broker --broker-id 0 ...`.
#
# Not built in this repository's CI: the development machines have no Docker engine. It is the
# image `skaffold.yaml` builds and the Helm chart (charts/, a later issue) will run.
FROM python:3.11-slim

# glibc malloc tunables for the service processes: keep 1 MiB gRPC messages on the heap
# instead of a fresh mmap per message (see docs/operations.md, "Memory allocator").
ENV GLIBC_TUNABLES=glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=536870912 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY headwater ./headwater
COPY services ./services
RUN pip install . && useradd --system --uid 10001 headwater \
    && mkdir -p /var/lib/headwater && chown headwater /var/lib/headwater

USER headwater
VOLUME ["/var/lib/headwater"]
# gRPC and Prometheus ports used by the chart; a service binds what its flags say.
EXPOSE 9092 9100
CMD ["python", "-m", "services.broker", "--help"]
