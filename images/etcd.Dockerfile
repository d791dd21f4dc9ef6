# syntax=docker/dockerfile:1
# The etcd image of the chart's etcd StatefulSet: Debian's etcd-server, run as
# /usr/local/bin/etcd (what charts/headwater's etcd container runs). Build from the repository
# root:   docker build -f images/etcd.Dockerfile -t headwater-etcd .
# Without Docker, scripts/k8s/build-images.sh builds the same image (docs/kubernetes.md, "Images").
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server \
    && rm -rf /var/lib/apt/lists/* \
    && ln -sf /usr/bin/etcd /usr/local/bin/etcd \
    && mkdir -p /var/lib/etcd && chown 10001:10001 /var/lib/etcd
WORKDIR /var/lib/etcd
USER 10001:10001
EXPOSE 2379 2380
VOLUME ["/var/lib/etcd"]
ENTRYPOINT ["/usr/local/bin/etcd"]
