"""The Helm chart (charts/headwater), its images and skaffold.yaml.

* ``helm lint --strict`` of the default values and of every scenario in charts/headwater/ci/;
* ``helm template`` of each scenario: every manifest validates offline and strictly against the
  Kubernetes 1.34 schemas (the ``kubernetes-validate`` package; unknown fields are errors), the
  objects the scenario promises are there and wired as it says (flags, volumes, probes);
* values.schema.json refuses bad values;
* ``helm install`` (no wait) into a real kube-apiserver creates every object of the chart and
  ``helm uninstall`` removes them (CRDs stay: Helm never deletes crds/);
* skaffold.yaml's release renders the same manifests as ``helm template`` with its values;
* the Dockerfiles parse and run as a non-root user.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.helpers.chart import CHART, SCENARIOS, by_kind, container, run, template
from tests.helpers.wait import wait_for
from tests.k8s.apiserver import REPO, tools_env

KUBE_VERSION = "1.34.0"
#: kinds of other projects' CRDs the chart may render (no schema in kubernetes-validate)
FOREIGN_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_helm_lint(k8s_tools: Path, scenario: str) -> None:
    argv = [str(k8s_tools / "helm"), "lint", "--strict", str(CHART)]
    for v in SCENARIOS[scenario]:
        argv += ["-f", str(v)]
    out = run(argv, tools_env(k8s_tools)).stdout
    assert "0 chart(s) failed" in out, out


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_template_validates_strictly(k8s_tools: Path, scenario: str) -> None:
    docs = template(k8s_tools, SCENARIOS[scenario])
    assert len(docs) > 10
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in FOREIGN_KINDS:
            assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
            continue
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message} at {exc.path}")
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(names) == len(set(names)), "duplicate objects"
    for doc in docs:  # every object carries the release's labels
        if doc["kind"] != "CustomResourceDefinition":
            labels = doc["metadata"]["labels"]
            assert labels["app.kubernetes.io/instance"] == "hw", doc["metadata"]["name"]


def test_default_objects(k8s_tools: Path) -> None:
    docs = template(k8s_tools, [])
    crds = by_kind(docs, "CustomResourceDefinition")
    assert set(crds) == {"topics.headwater.dev", "consumergroups.headwater.dev"}
    sts = by_kind(docs, "StatefulSet")
    assert set(sts) == {"hw-headwater-etcd", "hw-headwater-broker"}
    deps = by_kind(docs, "Deployment")
    assert set(deps) == {
        "hw-headwater-controller",
        "hw-headwater-coordinator",
        "hw-headwater-operator",
    }
    assert deps["hw-headwater-controller"]["spec"]["replicas"] >= 2
    assert set(by_kind(docs, "PodDisruptionBudget")) == {
        "hw-headwater-etcd",
        "hw-headwater-broker",
        "hw-headwater-controller",
        "hw-headwater-coordinator",
    }
    assert "hw-headwater-grafana-dashboard" in by_kind(docs, "ConfigMap")
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]
    # etcd holds the token key (the cluster's internal identity): only the services reach it
    (policy,) = by_kind(docs, "NetworkPolicy").values()
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "etcd"
    (peers,) = policy["spec"]["ingress"][0]["from"]
    (components,) = peers["podSelector"]["matchExpressions"]
    assert sorted(components["values"]) == ["broker", "controller", "coordinator", "etcd"]

    broker = sts["hw-headwater-broker"]
    assert broker["spec"]["serviceName"] == "hw-headwater-broker-headless"
    assert [t["metadata"]["name"] for t in broker["spec"]["volumeClaimTemplates"]] == ["data-0"]
    c = container(broker, "broker")
    args = c["args"]
    assert "--host=0.0.0.0" in args
    assert (
        "--advertised-host=$(POD_NAME).hw-headwater-broker-headless.headwater.svc.cluster.local"
        in args
    )
    assert "--etcd=hw-headwater-etcd:2379" in args
    assert "--data-dirs=/var/lib/headwater/data-0" in args
    assert '--broker-id "${POD_NAME##*-}"' in c["command"][2]
    assert c["startupProbe"]["grpc"]["port"] == 9092
    assert c["readinessProbe"]["grpc"]["port"] == 9092
    # readiness is the overall health (a broker: only once it has the cluster's metadata);
    # startup and liveness ask "liveness" (the process is up: a broker waiting for its first
    # UpdateMetadata is not restarted)
    assert c["readinessProbe"]["grpc"].get("service", "") == ""
    assert c["startupProbe"]["grpc"]["service"] == "liveness"
    assert c["livenessProbe"]["grpc"]["service"] == "liveness"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert broker["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert c["resources"]["requests"]["memory"]

    # day two: brokers roll one pod at a time (the StatefulSet controller deletes the next pod
    # only once the previous one is Ready, i.e. serving); SIGTERM moves leaderships away
    # (--controlled-shutdown-timeout-s) well within the grace period; the PDBs let an eviction
    # take at most one pod of each service
    assert broker["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert broker["spec"]["updateStrategy"].get("rollingUpdate", {}).get("maxUnavailable", 1) == 1
    pod = broker["spec"]["template"]["spec"]
    assert "--controlled-shutdown-timeout-s=20" in args
    assert pod["terminationGracePeriodSeconds"] > 20 + 10
    pdbs = by_kind(docs, "PodDisruptionBudget")
    for name, workload in [
        ("hw-headwater-broker", broker),
        ("hw-headwater-controller", deps["hw-headwater-controller"]),
        ("hw-headwater-coordinator", deps["hw-headwater-coordinator"]),
    ]:
        assert pdbs[name]["spec"]["maxUnavailable"] == 1
        selector = pdbs[name]["spec"]["selector"]["matchLabels"]
        assert selector.items() <= workload["spec"]["template"]["metadata"]["labels"].items()

    controller = container(deps["hw-headwater-controller"], "controller")
    assert "--host=$(POD_IP)" in controller["args"]
    assert controller["livenessProbe"]["grpc"]["port"] == 9093
    operator = container(deps["hw-headwater-operator"], "operator")
    assert "--bootstrap=hw-headwater-broker:9092" in operator["args"]
    assert "--namespace=headwater" in operator["args"]
    roles = by_kind(docs, "Role")
    assert roles["hw-headwater-operator"]["metadata"]["namespace"] == "headwater"

    # the dashboard in the chart is deploy/monitoring's, unchanged
    dashboard = by_kind(docs, "ConfigMap")["hw-headwater-grafana-dashboard"]
    shipped = (REPO / "deploy" / "monitoring" / "grafana-dashboard.json").read_text()
    assert json.loads(dashboard["data"]["headwater.json"]) == json.loads(shipped)
    assert (CHART / "files" / "grafana-dashboard.json").read_text() == shipped


def test_tls_objects(k8s_tools: Path) -> None:
    docs = template(k8s_tools, SCENARIOS["tls"])
    for name, kind, cname in [
        ("hw-headwater-broker", "StatefulSet", "broker"),
        ("hw-headwater-controller", "Deployment", "controller"),
        ("hw-headwater-coordinator", "Deployment", "coordinator"),
    ]:
        obj = by_kind(docs, kind)[name]
        c = container(obj, cname)
        assert "--tls-cert=/etc/headwater/tls/tls.crt" in c["args"]
        assert "--tls-ca=/etc/headwater/tls/ca.crt" in c["args"]
        assert "--tls-client-auth=required" in c["args"]
        assert "--authorizer" in c["args"]
        # grpc probes cannot speak TLS: the process is up when its port is; readiness is the
        # gRPC health's overall status over the plain-HTTP metrics port
        assert "tcpSocket" in c["startupProbe"] and "tcpSocket" in c["livenessProbe"]
        assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
        vols = {v["name"]: v for v in obj["spec"]["template"]["spec"]["volumes"]}
        assert vols["tls"]["secret"]["secretName"] == "headwater-tls"
    operator = by_kind(docs, "Deployment")["hw-headwater-operator"]
    env = {e["name"]: e.get("value") for e in container(operator, "operator")["env"]}
    assert env["HEADWATER_SECURITY_CONFIG"] == "/etc/headwater/security/security.json"
    security = by_kind(docs, "ConfigMap")["hw-headwater-operator-security"]
    assert json.loads(security["data"]["security.json"])["cert_file"].endswith("tls.crt")


def test_external_etcd_objects(k8s_tools: Path) -> None:
    docs = template(k8s_tools, SCENARIOS["external-etcd"])
    assert "hw-headwater-etcd" not in by_kind(docs, "StatefulSet")
    assert not [d for d in docs if "etcd" in d["metadata"]["name"] and d["kind"] == "Service"]
    broker = by_kind(docs, "StatefulSet")["hw-headwater-broker"]
    args = container(broker, "broker")["args"]
    assert "--etcd=etcd.storage.svc.cluster.local:2379" in args
    assert "--etcd-ca=/etc/headwater/etcd-tls/ca.crt" in args
    vols = {v["name"]: v for v in broker["spec"]["template"]["spec"]["volumes"]}
    assert vols["etcd-tls"]["secret"]["secretName"] == "headwater-etcd-client"


def test_full_objects(k8s_tools: Path) -> None:
    docs = template(k8s_tools, SCENARIOS["full"])
    etcd = by_kind(docs, "StatefulSet")["hw-headwater-etcd"]
    initial = next(a for a in container(etcd, "etcd")["args"] if "--initial-cluster=" in a)
    assert initial.count("=http://") == 3
    assert by_kind(docs, "PodDisruptionBudget")["hw-headwater-etcd"]["spec"]["maxUnavailable"] == 1
    broker = by_kind(docs, "StatefulSet")["hw-headwater-broker"]
    c = container(broker, "broker")
    assert "--data-dirs=/var/lib/headwater/data-0,/var/lib/headwater/data-1" in c["args"]
    assert "--config=min.insync.replicas=2" in c["args"]
    assert '--rack "$(cat /rack/rack)"' in c["command"][2]
    init = broker["spec"]["template"]["spec"]["initContainers"][0]
    env = {e["name"]: e for e in init["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NODE_LABEL"]["value"] == "topology.kubernetes.io/zone"
    assert "hw-headwater-broker-nodes" in by_kind(docs, "ClusterRole")
    assert "hw-headwater-operator" in by_kind(docs, "ClusterRole")  # all namespaces
    assert not by_kind(docs, "Role")
    operator = container(by_kind(docs, "Deployment")["hw-headwater-operator"], "operator")
    assert "--all-namespaces" in operator["args"]
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert len(monitors) == 3


def test_rack_script_runs(k8s_tools: Path, tmp_path: Path) -> None:
    """The init container's script, run against a stand-in of the node API (no kubelet here)."""
    import http.server
    import ssl
    import threading

    from headwater.dev.tls import CertificateAuthority

    docs = template(k8s_tools, SCENARIOS["full"])
    script = by_kind(docs, "ConfigMap")["hw-headwater-broker-rack"]["data"]["rack.py"]
    ca = CertificateAuthority(tmp_path / "pki")
    server_cert = ca.issue("api")
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("tok\n")
    (sa / "ca.crt").write_bytes(ca.cert_path.read_bytes())
    seen: list[tuple[str, str | None]] = []

    class Node(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Authorization")))
            body = json.dumps({"metadata": {"labels": {"topology.kubernetes.io/zone": "az-2"}}})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Node)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(server_cert.cert, server_cert.key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        rack_dir = tmp_path / "rack"
        rack_dir.mkdir()
        patched = script.replace('"/var/run/secrets/kubernetes.io/serviceaccount"', repr(str(sa)))
        patched = patched.replace('"/rack/rack"', repr(str(rack_dir / "rack")))
        env = {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(httpd.server_address[1]),
            "NODE_NAME": "node-7",
            "NODE_LABEL": "topology.kubernetes.io/zone",
            "PATH": "/usr/bin:/bin",
        }
        run([sys.executable, "-c", patched], env)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert (rack_dir / "rack").read_text() == "az-2"
    assert seen == [("/api/v1/nodes/node-7", "Bearer tok")]


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--set", "broker.replicas=0"], "'/broker/replicas': minimum"),
        (["--set", "etcd.enabled=false"], "'/etcd/external/endpoint': minLength"),
        (["--set", "tls.enabled=true"], "'/tls/secretName': minLength"),
        (["--set", "tls.clientAuth=sometimes"], "'/tls/clientAuth': value must be one of"),
        (["--set", "etcd.replicas=2"], "'/etcd/replicas': value must be one of"),
        # the kubelet's SIGKILL would cut the controlled shutdown short
        (
            ["--set", "broker.terminationGracePeriodSeconds=25"],
            "must exceed broker.controlledShutdownTimeoutSeconds",
        ),
        # a typo is refused, not ignored
        (["--set", "brokers.replicas=3"], "additional properties 'brokers' not allowed"),
    ],
)
def test_schema_refuses_bad_values(k8s_tools: Path, flags: list[str], error: str) -> None:
    argv = [str(k8s_tools / "helm"), "template", "hw", str(CHART), *flags]
    proc = run(argv, tools_env(k8s_tools), check=False)
    assert proc.returncode != 0
    assert error in proc.stderr, proc.stderr


# ---------------------------------------------------------------- a real API server


def kubectl(k8s_tools: Path, kubeconfig: Path, *args: str, check: bool = True):
    return run([str(k8s_tools / "kubectl"), *args], tools_env(k8s_tools, kubeconfig), check=check)


def test_helm_install_and_uninstall(k8s_tools: Path, kube_apiserver: Path) -> None:
    ns = "hw-chart"
    env = tools_env(k8s_tools, kube_apiserver)
    helm = str(k8s_tools / "helm")

    def kc(*args: str) -> str:
        return str(kubectl(k8s_tools, kube_apiserver, *args).stdout)

    kc("create", "namespace", ns)
    values = CHART / "ci" / "full-values.yaml"
    # everything of the "full" scenario but the ServiceMonitors (no prometheus-operator CRDs)
    common = ["-n", ns, "-f", str(values), "--timeout", "60s"]
    common += ["--set", "metrics.serviceMonitor.enabled=false"]
    started = time.monotonic()
    run([helm, "install", "hw", str(CHART), *common], env)
    install_s = time.monotonic() - started
    manifest = run([helm, "get", "manifest", "hw", "-n", ns], env).stdout
    objects = [d for d in yaml.safe_load_all(manifest) if d]
    assert len(objects) > 20

    def refs(docs: list[dict[str, Any]]) -> list[str]:
        out = []
        for d in docs:
            kind = d["kind"].lower()
            group = d["apiVersion"].split("/")[0] if "/" in d["apiVersion"] else ""
            res = f"{kind}.{group}" if group else kind
            out.append(f"{res}/{d['metadata']['name']}")
        return out

    namespaced = [d for d in objects if not d["kind"].startswith("Cluster")]
    cluster = [d for d in objects if d["kind"].startswith("Cluster")]
    assert len(kc("get", "-n", ns, "-o", "name", *refs(namespaced)).split()) == len(namespaced)
    assert len(kc("get", "-o", "name", *refs(cluster)).split()) == len(cluster)
    for crd in ("topics.headwater.dev", "consumergroups.headwater.dev"):
        kc("wait", "--for=condition=Established", "--timeout=30s", f"crd/{crd}")
    # the API server stored what the chart asked for (defaults applied, nothing pruned)
    sts = json.loads(kc("get", "-n", ns, "statefulset/hw-headwater-broker", "-o", "json"))
    assert sts["spec"]["replicas"] == 4
    assert len(sts["spec"]["volumeClaimTemplates"]) == 2

    # upgrade = scale: the StatefulSet follows the values, the release is at revision 2
    run([helm, "upgrade", "hw", str(CHART), *common, "--set", "broker.replicas=5"], env)
    sts = json.loads(kc("get", "-n", ns, "statefulset/hw-headwater-broker", "-o", "json"))
    assert sts["spec"]["replicas"] == 5
    status = json.loads(run([helm, "status", "hw", "-n", ns, "-o", "json"], env).stdout)
    assert (status["version"], status["info"]["status"]) == (2, "deployed")

    run([helm, "uninstall", "hw", "-n", ns, "--timeout", "60s"], env)

    def gone() -> bool:
        left = kc("get", "-n", ns, "-o", "name", "--ignore-not-found", *refs(namespaced))
        left += kc("get", "-o", "name", "--ignore-not-found", *refs(cluster))
        return not left.split()

    wait_for(
        gone, timeout=60, what="every object of the release gone after helm uninstall", interval=0.5
    )
    # Helm keeps CRDs from crds/ (deleting them would delete every Topic in the cluster)
    kc("get", "crd/topics.headwater.dev")
    assert install_s < 60


# ---------------------------------------------------------------- skaffold, images


def skaffold_release() -> dict[str, Any]:
    config = yaml.safe_load((REPO / "skaffold.yaml").read_text())
    assert config["apiVersion"].startswith("skaffold/v4")
    (release,) = config["deploy"]["helm"]["releases"]
    return {"config": config, "release": release}


def test_skaffold_render_matches_helm_template(k8s_tools: Path, tmp_path: Path) -> None:
    """What `skaffold render --offline` does with the helm deployer: substitute the built images
    into setValueTemplates and run `helm template` with those and setValues. The result must
    equal plain `helm template` with the same values written as a values file."""
    s = skaffold_release()
    config, release = s["config"], s["release"]
    assert (REPO / release["chartPath"]).resolve() == CHART
    images = {a["image"]: a for a in config["build"]["artifacts"]}
    assert set(images) == {"headwater", "headwater-operator", "headwater-etcd"}
    for art in images.values():
        # the custom builder: the script that also builds the images for the tests
        command = art["custom"]["buildCommand"].split()
        assert command == ["scripts/k8s/build-images.sh", "--skaffold"]
        assert os.access(REPO / art["context"] / command[0], os.X_OK)
        for path in art["custom"]["dependencies"]["paths"]:
            assert (REPO / art["context"] / path).exists(), path
    # the `docker` profile builds the same artifacts from the Dockerfiles
    (profile,) = config["profiles"]
    assert profile["name"] == "docker"
    patched = {p["value"]["image"]: p for p in profile["patches"]}
    assert set(patched) == set(images)
    for i, art in enumerate(config["build"]["artifacts"]):
        patch = patched[art["image"]]
        assert (patch["op"], patch["path"]) == ("replace", f"/build/artifacts/{i}")
        assert (REPO / patch["value"]["context"] / patch["value"]["docker"]["dockerfile"]).is_file()
    tag = "0123abc"
    subst = {}
    for image in images:
        key = image.replace("-", "_")
        subst[f"{{{{.IMAGE_REPO_{key}}}}}"] = image
        subst[f"{{{{.IMAGE_TAG_{key}}}}}"] = tag
    sets = []
    for k, v in release["setValueTemplates"].items():
        for pattern, value in subst.items():
            v = v.replace(pattern, value)
        assert "{{" not in v, f"unknown template in {k}: {v}"
        sets.append(f"{k}={v}")
    for k, v in release["setValues"].items():
        sets.append(f"{k}={v}")
    # skaffold passes every value as a string
    flags = [x for s_ in sets for x in ("--set-string", s_)]
    rendered = template(k8s_tools, [], *flags, namespace=release["namespace"])

    values: dict[str, Any] = {}
    for s_ in sets:
        key, value = s_.split("=", 1)
        node = values
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    plain = template(k8s_tools, [values_file], namespace=release["namespace"])
    assert rendered == plain
    used = {
        c["image"]
        for d in rendered
        if d["kind"] in ("Deployment", "StatefulSet")
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert {f"headwater:{tag}", f"headwater-operator:{tag}", f"headwater-etcd:{tag}"} <= used


DOCKERFILES = [REPO / "Dockerfile", REPO / "images" / "operator.Dockerfile"]
ETCD_DOCKERFILE = REPO / "images" / "etcd.Dockerfile"
INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word, rest.strip()))
    return out


def base_image_default(steps: list[tuple[str, str]]) -> str:
    """The base image is the build argument BASE_IMAGE, declared before the first FROM with a
    default; every stage starts from it."""
    assert steps[0][0] == "ARG"
    name, _, default = steps[0][1].partition("=")
    assert name == "BASE_IMAGE" and default
    stages = [rest for word, rest in steps if word == "FROM"]
    assert stages and all(re.match(r"\$\{BASE_IMAGE\}( AS \w+)?$", s) for s in stages)
    return default


@pytest.mark.parametrize("path", [*DOCKERFILES, ETCD_DOCKERFILE], ids=lambda p: p.name)
def test_dockerfile(path: Path) -> None:
    steps = dockerfile_instructions(path)
    for word, rest in steps:
        assert word in INSTRUCTIONS, f"{path.name}: unknown instruction {word!r}"
        assert word == word.upper()
        if word == "ADD":
            pytest.fail(f"{path.name}: use COPY, not ADD")
        if word == "COPY" and not rest.startswith("--from="):
            sources = [s for s in rest.split()[:-1] if not s.startswith("--")]
            for src in sources:
                assert (REPO / src).exists(), f"{path.name}: COPY source {src} missing"
        if word in ("CMD", "ENTRYPOINT"):
            json.loads(rest)  # exec form
    default = base_image_default(steps)
    expected = "debian:bookworm-slim" if path == ETCD_DOCKERFILE else "python:3.11-slim"
    assert default == expected
    final = steps[max(i for i, (w, _) in enumerate(steps) if w == "FROM") :]
    users = [rest for word, rest in final if word == "USER"]
    assert users and users[-1].split(":")[0] == "10001"  # the chart's runAsUser
    assert not (REPO / ".dockerignore").read_text().count("\nheadwater\n")
