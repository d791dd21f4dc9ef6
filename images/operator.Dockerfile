# syntax=docker/dockerfile:1
# The Headwater operator image (operator/headwater_operator, kopf): Topic and ConsumerGroup
# resources. Build from the repository root:
#   docker build -f images/operator.Dockerfile -t headwater-operator .
# Without Docker, scripts/k8s/build-images.sh builds the same image (what skaffold.yaml and the
# tests use). BASE_IMAGE: as in the root Dockerfile (any Python 3.11 image with pip and `python`).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY headwater ./headwater
COPY services ./services
COPY spark ./spark
COPY operator ./operator
# one wheel holds the client library and headwater_operator; kopf is the `operator` extra
RUN pip wheel --wheel-dir /wheels '.[operator]'

FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels \
    && (getent group headwater >/dev/null || groupadd --system --gid 10001 headwater) \
    && (id -u headwater >/dev/null 2>&1 || useradd --system --uid 10001 --gid 10001 \
        --no-create-home --shell /usr/sbin/nologin headwater)
USER 10001:10001
ENTRYPOINT ["python", "-m", "headwater_operator"]
CMD ["--help"]
