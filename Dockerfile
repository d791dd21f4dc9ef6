# syntax=docker/dockerfile:1
# The Headwater services image: broker, controller and coordinator share it, and the CLI
# (`headwater ...`) is in it too. The command picks the service, e.g.
# `python -m services.broker --broker-id 0 ...`; the Helm chart (charts/headwater) sets it.
#
# Not built in this repository's CI: the development machines have no Docker engine.
# The operator's image is images/operator.Dockerfile. Without Docker, scripts/k8s/build-images.sh
# builds the same image (what skaffold.yaml and the tests use; docs/kubernetes.md, "Images").
#
# BASE_IMAGE: any Python 3.11 image with pip, `python` and `sh`; the default is Docker Hub's.
# The Debian bookworm base of build-images.sh works too (`build-images.sh base` writes it as an
# archive for `docker load`): it is an "externally managed" system Python (PEP 668), hence
# PIP_BREAK_SYSTEM_PACKAGES, and it has the headwater user already.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY headwater ./headwater
COPY services ./services
COPY spark ./spark
# the services need the server platform's dependencies: the `server` extra
RUN pip wheel --wheel-dir /wheels '.[server]'

FROM ${BASE_IMAGE}
# glibc malloc tunables for the service processes: keep 1 MiB gRPC messages on the heap
# instead of a fresh mmap per message (see docs/operations.md, "Memory allocator").
ENV GLIBC_TUNABLES=glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=536870912:glibc.malloc.arena_max=2 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels \
    && (getent group headwater >/dev/null || groupadd --system --gid 10001 headwater) \
    && (id -u headwater >/dev/null 2>&1 || useradd --system --uid 10001 --gid 10001 \
        --no-create-home --shell /usr/sbin/nologin headwater) \
    && mkdir -p /var/lib/headwater && chown 10001:10001 /var/lib/headwater
WORKDIR /var/lib/headwater
USER 10001:10001
VOLUME ["/var/lib/headwater"]
# gRPC ports used by the chart (broker, controller, coordinator) and Prometheus metrics
EXPOSE 9092 9093 9094 9100
CMD ["python", "-m", "services.broker", "--help"]
