"""The k8s/ manifests: every kustomize overlay renders, every object validates against the Kubernetes
schemas in strict mode, CRD objects have what their CRDs require and point at real ports, and every
``vcemu`` command line in a pod parses with the package's own argument parsers."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is a dev dependency (pip install -e '.[dev]')")
kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is a dev dependency")

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = sorted(p.name for p in (ROOT / "k8s" / "overlays").iterdir() if (p / "kustomization.yaml").exists())
#: A kubectl in the venv (`make test` runs .venv/bin/python without .venv/bin on PATH) or on PATH.
KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
#: The newest Kubernetes the installed kubernetes-validate has schemas for (1.37.0 with version 1.37.0).
K8S_VERSION = kv.latest_version()
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "RayCluster"}
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl not found in the venv or on PATH (needed for "
                                   "kubectl kustomize)")


@functools.cache
def render(overlay: str) -> tuple[dict, ...]:
    out = subprocess.run([KUBECTL, "kustomize", str(ROOT / "k8s" / "overlays" / overlay)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {overlay} failed: {out.stderr}"
    docs = tuple(d for d in yaml.safe_load_all(out.stdout) if d)
    assert docs, f"{overlay} rendered nothing"
    return docs


def test_there_are_overlays_for_each_deployment_mode():
    assert {"local", "prometheus-operator", "plain-prometheus", "kuberay", "no-cgroups"} <= set(OVERLAYS)


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_strictly(overlay: str):
    checked = []
    for doc in render(overlay):
        if doc["kind"] != "Namespace":  # a resource an overlay adds must not land in "default"
            assert doc["metadata"].get("namespace") == "vcemu", f"{doc['kind']} {doc['metadata']['name']}"
        if doc["kind"] in CRD_KINDS:
            continue  # no schema in kubernetes-validate: see test_crd_objects_*
        kv.validate(doc, K8S_VERSION, strict=True)  # raises ValidationError naming the field
        checked.append(doc["kind"])
    print(f"{overlay}: {len(checked)} objects valid against Kubernetes {K8S_VERSION} (strict): {checked}")
    assert checked


def test_strict_validation_rejects_an_unknown_field():
    """The validator really is strict: a misspelt field in a container fails."""
    if KUBECTL is None:
        pytest.skip("kubectl not found on PATH")
    (dep,) = [d for d in render("local") if d["kind"] == "Deployment"]
    bad = copy.deepcopy(dep)
    bad["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, K8S_VERSION, strict=True)


def _pod_template_valid(template: dict, where: str) -> None:
    """Check an embedded pod template against the core PodTemplate schema, strictly."""
    kv.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"}, "template": template},
                K8S_VERSION, strict=True)
    assert template["spec"]["containers"], where


@needs_kubectl
def test_crd_objects_of_the_prometheus_operator_overlay():
    """ServiceMonitor/PodMonitor (monitoring.coreos.com/v1): the CRD requires spec.selector, and each
    endpoint names a port; the ports must exist on the selected Service / pods, or nothing is scraped."""
    docs = render("prometheus-operator")
    by_kind = {d["kind"]: d for d in docs}
    sm, pm = by_kind["ServiceMonitor"], by_kind["PodMonitor"]
    for obj in (sm, pm):
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        assert obj["metadata"]["name"] and obj["metadata"]["namespace"] == "vcemu"
        assert obj["spec"]["selector"]["matchLabels"]
    svc = next(d for d in docs if d["kind"] == "Service"
               and sm["spec"]["selector"]["matchLabels"].items() <= d["metadata"]["labels"].items())
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}
    pods = [d["spec"]["template"] for d in docs if d["kind"] in ("DaemonSet", "Deployment")
            and pm["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
    assert pods, "the PodMonitor selects no pods"
    ports = {p["name"] for t in pods for c in t["spec"]["containers"] for p in c.get("ports", [])}
    assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} <= ports


@needs_kubectl
def test_crd_object_of_the_kuberay_overlay():
    """RayCluster (ray.io/v1): required spec.headGroupSpec.template and, per worker group, groupName,
    template and replica bounds; rayStartParams is present everywhere (required by older CRD versions).
    The embedded pod templates are validated strictly against the core PodTemplate schema."""
    docs = render("kuberay")
    (rc,) = [d for d in docs if d["kind"] == "RayCluster"]
    assert rc["apiVersion"] == "ray.io/v1" and rc["metadata"]["namespace"] == "vcemu"
    head = rc["spec"]["headGroupSpec"]
    assert "rayStartParams" in head
    _pod_template_valid(head["template"], "headGroupSpec")
    for g in rc["spec"]["workerGroupSpecs"]:
        assert g["groupName"] and "rayStartParams" in g
        assert 0 <= g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
        _pod_template_valid(g["template"], g["groupName"])
    # The base's agent DaemonSet and coordinator Deployment are replaced by the RayCluster.
    assert not [d for d in docs if d["kind"] in ("DaemonSet", "Deployment")]
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    assert svc["spec"]["selector"] == {"ray.io/cluster": rc["metadata"]["name"], "ray.io/node-type": "head"}


@needs_kubectl
@pytest.mark.parametrize("overlay", ["plain-prometheus", "prometheus-operator"])
def test_the_grafana_dashboard_configmap_is_the_json_file(overlay: str):
    (cm,) = [d for d in render(overlay)
             if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("vcemu-grafana")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # what the Grafana sidecar selects on
    assert cm["data"]["vcemu-dashboard.json"] == (ROOT / "k8s" / "grafana" / "vcemu-dashboard.json").read_text()


# ---- the command lines in the pods are real ---------------------------------------------------------

_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
#: Stand-ins for downward-API values (they are only known in a running pod).
_FIELD_VALUES = {"spec.nodeName": "node-1.example", "status.podIP": "10.0.0.7"}


def _containers(doc: dict) -> list[tuple[str, dict]]:
    if doc["kind"] in ("Deployment", "DaemonSet"):
        return [(doc["metadata"]["name"], c) for c in doc["spec"]["template"]["spec"]["containers"]]
    if doc["kind"] == "RayCluster":
        spec = doc["spec"]
        groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
        return [(doc["metadata"]["name"], c) for g in groups for c in g["template"]["spec"]["containers"]]
    return []


def _environment(container: dict, configmaps: dict[str, dict]) -> dict[str, str]:
    env: dict[str, str] = {}
    for src in container.get("envFrom", []):
        name = src["configMapRef"]["name"]
        assert name in configmaps, f"envFrom names ConfigMap {name!r}, which the overlay does not render"
        env.update(configmaps[name])
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "secretKeyRef" in e["valueFrom"]:  # (a secret: known only in the cluster)
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = f"<secret {ref['name']}/{ref['key']}>"
        else:
            env[e["name"]] = _FIELD_VALUES[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def _vcemu_commands(overlay: str) -> list[tuple[str, list[str]]]:
    docs = render(overlay)
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    out = []
    for owner, c in (pc for d in docs for pc in _containers(d)):
        if c.get("command"):  # e.g. Ray's own containers (KubeRay sets `ray start` itself)
            continue
        if not c.get("args"):
            continue
        env, where = _environment(c, configmaps), f"{owner}/{c['name']}"

        def subst(m: re.Match, env=env, where=where) -> str:
            assert m.group(1) in env, f"{where}: $({m.group(1)}) is not in the container's env"
            return env[m.group(1)]

        out.append((where, [_VAR.sub(subst, a) for a in c["args"]]))
    return out


def _help(subcommand: str) -> str:
    from coordinator.cli import build_parser

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
        build_parser().parse_args([subcommand, "--help"])
    return buf.getvalue()


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pod_command_lines_parse_with_the_package_parsers(overlay: str):
    """The image's entrypoint is ``vcemu``; each container's args must be accepted by the same parser
    ``vcemu`` uses (flags exist, values valid: the policy name from the ConfigMap, sizes, ports)."""
    from coordinator.cli import build_parser
    from node_agent.cli import build_parser as agent_parser
    from vcemu.limits import address_refusal, target_refusal

    commands = _vcemu_commands(overlay)
    if overlay != "kuberay":
        assert {argv[0] for _, argv in commands} == {"coordinator", "agent"}
    for where, argv in commands:
        if argv[0] == "up" and "--ray" not in _help("up"):
            pytest.skip("vcemu up --ray is the Ray backend (issue 6 part 1), not on this branch yet")
        try:
            if argv[0] == "agent":
                args = agent_parser().parse_args(argv[1:])
                assert args.bind == "0.0.0.0" and args.coordinator and args.advertise, where
                # What `vcemu agent` checks after parsing, before it starts (and the coordinator at registration).
                assert target_refusal(args.coordinator) is None, (where, args.coordinator)
                assert address_refusal("--advertise", args.advertise) is None, (where, args.advertise)
            else:
                args = build_parser().parse_args(argv)
        except SystemExit as e:
            pytest.fail(f"{overlay}: {where}: `vcemu {' '.join(argv)}` is rejected by the parser (exit {e.code})")
        if argv[0] in ("coordinator", "up"):  # kubectl port-forward dials localhost in the pod, a Service its IP
            assert args.bind == "0.0.0.0", f"{where}: a coordinator in a pod must listen on all interfaces"
            assert args.metrics_port is not None


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_vcemu_pod_reads_the_token_from_the_secret(overlay: str):
    """Security review: the base ran the coordinator on every interface with neither token nor TLS, so anything in
    the cluster network could submit, register agents and run or stop tasks on the privileged agents. Every
    coordinator and agent reads ``--token-file`` from a read-only mount of Secret ``vcemu-token``."""
    docs = render(overlay)
    checked = []
    for doc in docs:
        pod = (doc["spec"]["template"]["spec"] if doc["kind"] in ("Deployment", "DaemonSet") else
               doc["spec"]["headGroupSpec"]["template"]["spec"] if doc["kind"] == "RayCluster" else None)
        if pod is None:
            continue
        secrets = {v["name"]: v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
        for c in pod["containers"]:
            if c.get("command") or not c.get("args") or c["args"][0] not in ("coordinator", "agent", "up"):
                continue
            (flag,) = [a for a in c["args"] if a.startswith("--token-file=")]
            path = flag.split("=", 1)[1]
            mounts = [m for m in c.get("volumeMounts", []) if path.startswith(m["mountPath"].rstrip("/") + "/")]
            assert len(mounts) == 1 and mounts[0].get("readOnly"), (overlay, c["name"], mounts)
            assert secrets.get(mounts[0]["name"]) == "vcemu-token", (overlay, c["name"], secrets)
            assert path == f"{mounts[0]['mountPath'].rstrip('/')}/token", path  # (the Secret's key is "token")
            checked.append(c["args"][0])
    assert checked, f"{overlay}: no vcemu container"
    if overlay != "kuberay":
        assert sorted(checked) == ["agent", "coordinator"], checked


@needs_kubectl
def test_the_ray_cluster_authenticates_and_keeps_its_ports_to_itself():
    """Security review: the kuberay overlay ran Ray (which runs whatever code it is given, on privileged workers)
    with no authentication and its dashboard on every interface. Every container of the RayCluster runs with
    Ray's token authentication from Secret vcemu-token, the dashboard listens on loopback, and a NetworkPolicy
    admits only the cluster's own pods but to the coordinator's API and metrics."""
    docs = render("kuberay")
    (ray,) = [d for d in docs if d["kind"] == "RayCluster"]
    assert ray["spec"]["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "127.0.0.1"
    containers = _containers(ray)
    assert len(containers) == 3
    for _, c in containers:
        env = {e["name"]: e for e in c.get("env", [])}
        assert env["RAY_AUTH_MODE"]["value"] == "token", c["name"]
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "vcemu-token", "key": "ray-token"}
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "vcemu-ray"]
    cluster = {"ray.io/cluster": ray["metadata"]["name"]}
    assert policy["spec"]["podSelector"]["matchLabels"] == cluster
    rules = policy["spec"]["ingress"]
    assert sorted(p["port"] for rule in rules if "from" not in rule for p in rule["ports"]) == [9100, 50051]
    assert [r["from"] for r in rules if "from" in r] == [[{"podSelector": {"matchLabels": cluster}}]]


@needs_kubectl
@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o != "kuberay"])
def test_only_the_coordinator_may_call_the_agents(overlay: str):
    """Security review: any pod could call the privileged agents' API. A NetworkPolicy admits only the
    coordinator's pods to the agents' gRPC port; their metrics port stays open to scrapers."""
    docs = render(overlay)
    (agents,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (coordinator,) = [d for d in docs if d["kind"] == "Deployment"]
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "vcemu-agent"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= agents["spec"]["template"]["metadata"]["labels"].items()
    (from_coordinator, scrape) = policy["spec"]["ingress"]
    (peer,) = from_coordinator["from"]
    assert peer["podSelector"]["matchLabels"].items() <= coordinator["spec"]["template"]["metadata"]["labels"].items()
    assert not peer["podSelector"]["matchLabels"].items() <= agents["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in agents["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert [p["port"] for p in from_coordinator["ports"]] == [ports["grpc"]]
    assert "from" not in scrape and [p["port"] for p in scrape["ports"]] == [ports["metrics"]]


def _cores(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_pods_that_run_tasks_leave_cpu_for_the_agent(overlay: str):
    """A pod's CPU limit covers the agent and every task it runs (their cgroups nest under the pod's): it must hold
    its hosts' cores plus about a quarter core for the agent itself (and, under KubeRay, Ray's worker processes),
    else the tasks are held below the shares the coordinator gives them. KubeRay places the hosts evenly over the
    worker pods."""
    docs = render(overlay)
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    checked = 0
    for doc in docs:
        if doc["kind"] == "DaemonSet":
            pods = [(doc["spec"]["template"], 1)]
        elif doc["kind"] == "RayCluster":
            pods = [(g["template"], g["replicas"]) for g in doc["spec"]["workerGroupSpecs"]]
            (head,) = [c for c in doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
                       if "up" in c.get("args", [])]
            env = _environment(head, configmaps)
        else:
            continue
        for template, replicas in pods:
            container = template["spec"]["containers"][0]
            if doc["kind"] == "DaemonSet":
                env = _environment(container, configmaps)
                hosts = int(env["VCEMU_HOSTS_PER_AGENT"])
            else:
                hosts = -(-int(env["VCEMU_HOSTS"]) // replicas)
            need = hosts * float(env["VCEMU_CPUS_PER_HOST"]) + 0.25
            limit = _cores(container["resources"]["limits"]["cpu"])
            assert need <= limit, (f"{overlay}: {doc['metadata']['name']}: {hosts} hosts of "
                                   f"{env['VCEMU_CPUS_PER_HOST']} cores and the agent need {need:g} cores; the limit "
                                   f"is {limit:g}")
            checked += 1
    assert checked, f"{overlay}: no pod that runs tasks"


# ---- the image's environment on a read-only root filesystem -------------------------------------------


def _image_env() -> dict[str, str]:
    """The ``ENV`` settings of the Dockerfile's final stage (PATH aside)."""
    import shlex

    final = (ROOT / "Dockerfile").read_text().rsplit("\nFROM ", 1)[1]
    env: dict[str, str] = {}
    for line in final.splitlines():
        if line.startswith("ENV "):
            env.update(kv.split("=", 1) for kv in shlex.split(line[4:]))
    env.pop("PATH", None)
    return env


@pytest.mark.timeout(180)
def test_the_coordinator_starts_on_a_read_only_root_filesystem_with_the_images_environment():
    """The coordinator Deployment runs with ``readOnlyRootFilesystem: true`` (only its volumes, ``/tmp`` among
    them, are writable) as a user who does not own the package: here the package and $HOME are a read-only bind
    mount in a private mount namespace, with the image's ENV. The coordinator must serve, not die importing."""
    import os
    import signal
    import sys
    import tempfile

    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("needs root and unshare(1) for a read-only bind mount")
    (dep,) = [d for d in yaml.safe_load_all((ROOT / "k8s/base/coordinator-deployment.yaml").read_text())]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}
    script = ("set -e; mount --bind \"$1\" \"$1\"; mount -o remount,ro,bind \"$1\"; cd \"$1\"; shift; "
              "exec \"$@\"")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(ROOT / "k8s"), **_image_env()}
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            [unshare, "-m", "--propagation", "private", "sh", "-c", script, "sh", str(ROOT), sys.executable, "-m",
             "coordinator.cli", "coordinator", "--policy", "greedy-pmtn", "--bind", "127.0.0.1", "--port", "0"],
            stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 150
            while proc.poll() is None and b"listening on" not in _read(out) and time.monotonic() < deadline:
                time.sleep(0.5)
            text = _read(out).decode(errors="replace")
            assert "listening on" in text, text[-3000:]
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _read(fh) -> bytes:
    fh.seek(0)
    return fh.read()


@needs_kubectl
def test_the_image_serves_the_endpoints_of_kuberays_default_probes():
    """The Ray containers of the kuberay overlay define no probes, so KubeRay gives them its own: wget of the
    dashboard agent's /api/local_raylet_healthz (52365) and, on the head, the dashboard's /api/gcs_healthz (8265).
    Ray serves those only with its ``default`` extra (plain ``ray`` starts both in minimal mode, no HTTP: checked
    with ``ray start --head --dashboard-host=0.0.0.0``), so the image must install it, or no Ray pod gets ready."""
    (rc,) = [d for d in render("kuberay") if d["kind"] == "RayCluster"]
    groups = [rc["spec"]["headGroupSpec"], *rc["spec"]["workerGroupSpecs"]]
    ray_containers = [g["template"]["spec"]["containers"][0] for g in groups]  # KubeRay's: the first container
    assert not any(c.get(p) for c in ray_containers for p in ("readinessProbe", "livenessProbe"))
    installs = [ln for ln in (ROOT / "Dockerfile").read_text().splitlines() if "pip install" in ln]
    assert any(re.search(r"""['"]?ray\[default\]""", ln) for ln in installs), installs


@needs_kubectl  # it renders the kuberay overlay: without kubectl it failed with a TypeError, not skipped
def test_the_image_installs_the_ray_version_the_raycluster_declares():
    """KubeRay requires the image's Ray to be the RayCluster's ``rayVersion``; an unpinned install would take
    whatever Ray pip picks on the day the image is built."""
    (rc,) = [d for d in render("kuberay") if d["kind"] == "RayCluster"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    (pinned,) = re.findall(r"^ARG RAY_VERSION=(\S+)$", dockerfile, flags=re.MULTILINE)
    assert pinned == rc["spec"]["rayVersion"]
    installs = [ln for ln in dockerfile.splitlines() if "pip install" in ln and "ray[default]" in ln]
    assert installs and all("ray[default]==${RAY_VERSION}" in ln for ln in installs), installs
