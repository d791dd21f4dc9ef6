# syntax=docker/dockerfile:1
# The Headwater services image: broker, controller and coordinator share it, and the CLI
# (`headwater ...`) is in it too. The command picks the service, e.g.
# `python -m services.broker --broker-id 0 ...`; the Helm chart (charts/headwater) sets it.
#
# Not built in this repository's CI: the development machines have no Docker engine.
# skaffold.yaml builds it as the image `headwater`; the operator's image is
# images/operator.Dockerfile.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY headwater ./headwater
COPY services ./services
COPY spark ./spark
RUN pip wheel --wheel-dir /wheels .

FROM python:3.11-slim
# glibc malloc tunables for the service processes: keep 1 MiB gRPC messages on the heap
# instead of a fresh mmap per message (see docs/operations.md, "Memory allocator").
ENV GLIBC_TUNABLES=glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=536870912:glibc.malloc.arena_max=2 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels \
    && groupadd --system --gid 10001 headwater \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin headwater \
    && mkdir -p /var/lib/headwater && chown 10001:10001 /var/lib/headwater
WORKDIR /var/lib/headwater
USER 10001:10001
VOLUME ["/var/lib/headwater"]
# gRPC ports used by the chart (broker, controller, coordinator) and Prometheus metrics
EXPOSE 9092 9093 9094 9100
CMD ["python", "-m", "services.broker", "--help"]
