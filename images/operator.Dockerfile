# syntax=docker/dockerfile:1
# The Headwater operator image (operator/headwater_operator, kopf): Topic and ConsumerGroup
# resources. Build from the repository root:
#   docker build -f images/operator.Dockerfile -t headwater-operator .
# (skaffold.yaml builds it as the image `headwater-operator`). Not built in CI: no Docker engine.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY headwater ./headwater
COPY services ./services
COPY spark ./spark
COPY operator ./operator
# one wheel holds the client library and headwater_operator; kopf is the `operator` extra
RUN pip wheel --wheel-dir /wheels '.[operator]'

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels \
    && groupadd --system --gid 10001 headwater \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin headwater
USER 10001:10001
ENTRYPOINT ["python", "-m", "headwater_operator"]
CMD ["--help"]
