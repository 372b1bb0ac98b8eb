"""The Kubernetes manifests of deploy/kubernetes/, checked offline: no cluster, no kubectl.

Every object is validated, strictly (an unknown field fails), against the Kubernetes OpenAPI
schemas that the kubernetes-validate package bundles, so nothing is downloaded; the tests make
sure of it by refusing every network connection while they validate. The KEDA ScaledObject is a
custom resource those schemas do not know: it is checked by reading it. Then the design: what the
manifests must agree on with each other, with docker-compose.yml and with our own code (a
worker's device, the settings' names and defaults), asked of that code rather than restated.
The Redis start scripts run here with stand-ins for redis-cli and redis-server.
"""

from __future__ import annotations

import copy
import re
import socket
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml

from app.auth import Accounts
from app.settings import Settings
from app.webhooks.signing import signer
from app.worker import gpu
from app.worker.host import worker_envs
from tests.test_compose import IMAGE_PATHS, PUBLIC_HOST, nvidia_smi_listing

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
KUSTOMIZATION = KUBE / "kustomization.yaml"
SECRETS_EXAMPLE = KUBE / "secret.example.yaml"
KEDA_FILE = KUBE / "optional" / "keda-scaledobject.yaml"
#: A second class of GPU worker, on a node pool of its own (a mixed fleet, issue 41).
CLASS_FILE = KUBE / "optional" / "worker-gpu-small.yaml"
DOCS = ROOT / "docs" / "kubernetes.md"
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

#: The Kubernetes versions whose schemas every manifest must pass: the oldest we claim to run on
#: and the newest that kubernetes-validate bundles.
K8S_VERSIONS = ("1.30", "1.37")
#: Every file of the folder, the optional ones included, except the kustomization itself.
MANIFESTS = sorted(p for p in KUBE.rglob("*.yaml") if p != KUSTOMIZATION)
#: What `kubectl apply -k` must not apply: the Secrets' placeholders, and what needs KEDA.
NOT_APPLIED = {SECRETS_EXAMPLE, KEDA_FILE, CLASS_FILE}

FAIRGPU_IMAGES = {"fairgpu:cpu", "fairgpu:gpu"}
GPU_RESOURCE = "nvidia.com/gpu"
#: The compose service each of our Deployments stands for.
COMPOSE_TWINS = {
    "api": "api",
    "worker-gpu": "worker-gpu",
    "worker-cpu": "worker-cpu",
    "beat": "beat",
    "webhooks": "webhooks",
}
WORKERS = ("worker-gpu", "worker-cpu")
#: Variables a fairgpu container may see that are not settings: the device's, and the pod's own
#: name from the downward API.
NON_SETTINGS = {"CUDA_VISIBLE_DEVICES", "POD_NAME"}
NON_SETTING_PREFIXES = ("NVIDIA_",)
#: Names that look like host names but are Kubernetes API groups and well-known label or
#: resource prefixes, which the manifests cannot do without. No registry, no package index.
API_NAMES = {"nvidia.com", "keda.sh", "kustomize.config.k8s.io", "kubernetes.io"}


# --- reading the manifests -------------------------------------------------------------------


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def validation_cases() -> list[Any]:
    cases = []
    for path in MANIFESTS:
        if path == KEDA_FILE:
            continue
        for index, obj in enumerate(documents(path)):
            for version in K8S_VERSIONS:
                name = f"{path.relative_to(KUBE)}:{obj['kind']}/{obj['metadata']['name']}@{version}"
                cases.append(pytest.param(path, index, version, id=name))
    return cases


@pytest.fixture(scope="module")
def kustomization() -> dict[str, Any]:
    return yaml.safe_load(KUSTOMIZATION.read_text())


@pytest.fixture(scope="module")
def applied(kustomization) -> dict[tuple[str, str], dict[str, Any]]:
    """What `kubectl apply -k deploy/kubernetes` creates, by (kind, name)."""
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for resource in kustomization["resources"]:
        for obj in documents(KUBE / resource):
            assert key(obj) not in objects, f"two {key(obj)}"
            objects[key(obj)] = obj
    return objects


@pytest.fixture(scope="module")
def secrets() -> dict[str, dict[str, str]]:
    """The Secrets the pods read (made with `kubectl create secret`; their example file)."""
    return {obj["metadata"]["name"]: obj["stringData"] for obj in documents(SECRETS_EXAMPLE)}


@pytest.fixture(scope="module")
def keda() -> dict[str, Any]:
    (obj,) = documents(KEDA_FILE)
    return obj


@pytest.fixture(scope="module")
def compose_services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(COMPOSE_FILE.read_text())["services"]


def of_kind(objects: dict[tuple[str, str], dict[str, Any]], kind: str) -> dict[str, Any]:
    return {name: obj for (k, name), obj in objects.items() if k == kind}


def workloads(objects) -> dict[str, dict[str, Any]]:
    return {**of_kind(objects, "Deployment"), **of_kind(objects, "StatefulSet")}


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod_spec(workload)["containers"]
    return only


def fairgpu_workloads(objects) -> dict[str, dict[str, Any]]:
    return {n: w for n, w in workloads(objects).items() if container(w)["image"] in FAIRGPU_IMAGES}


def configmap(objects, name: str) -> dict[str, str]:
    return objects["ConfigMap", name]["data"]


def container_env(
    box: dict[str, Any], objects, secrets, pod_name: str = "pod-0", node_name: str = "node-0"
) -> dict[str, str]:
    """The environment the kubelet gives this container: envFrom, then env in order, each
    `$(NAME)` expanded from what is defined before it (as Kubernetes does); the downward API's
    pod name and node name as given."""
    env: dict[str, str] = {}
    for source in box.get("envFrom", []):
        if "configMapRef" in source:
            env.update(configmap(objects, source["configMapRef"]["name"]))
        else:
            env.update(secrets[source["secretRef"]["name"]])
    for var in box.get("env", []):
        if "value" in var:
            value = re.sub(
                r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env[m.group(1)], var["value"]
            )
        else:
            field = var["valueFrom"]["fieldRef"]["fieldPath"]
            assert var["valueFrom"] == {"fieldRef": {"fieldPath": field}}, var
            value = {"metadata.name": pod_name, "spec.nodeName": node_name}[field]
        env[var["name"]] = value
    return env


def setting_names() -> set[str]:
    return {name.upper() for name in Settings.model_fields}


def settings_in(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The Settings a process with exactly this environment reads."""
    for name in setting_names():
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()


def probe_port(box: dict[str, Any], probe: dict[str, Any]) -> int:
    port = probe["httpGet"]["port"]
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in box["ports"] if p["name"] == port]
    return int(number)


def grace_s(compose_value: str) -> float:
    match = re.fullmatch(r"(\d+)s", compose_value)
    assert match, compose_value
    return float(match.group(1))


# --- the files and the kustomization ---------------------------------------------------------


def test_kustomization_applies_every_manifest_but_the_example_and_the_optional(kustomization):
    listed = {KUBE / resource for resource in kustomization["resources"]}
    assert all(path.is_file() for path in listed)
    assert listed == set(MANIFESTS) - NOT_APPLIED
    assert kustomization["namespace"] == "fairgpu"


def test_every_object_lives_in_the_fairgpu_namespace():
    for path in MANIFESTS:
        for obj in documents(path):
            if obj["kind"] == "Namespace":
                assert obj["metadata"]["name"] == "fairgpu"
            else:
                assert obj["metadata"].get("namespace") == "fairgpu", (path.name, key(obj))


def test_the_namespace_is_created_with_the_rest(applied):
    assert ("Namespace", "fairgpu") in applied


# --- the schemas, offline --------------------------------------------------------------------


@pytest.fixture
def offline(monkeypatch):
    """No connection out while the validator runs: its schemas must all be on this machine."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"the validator tried the network: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_the_validator_bundles_the_versions_we_check():
    bundled = {".".join(v.split(".")[:2]) for v in kubernetes_validate.utils.all_versions()}
    assert set(K8S_VERSIONS) <= bundled


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize(("path", "index", "version"), validation_cases())
def test_every_manifest_passes_the_strict_kubernetes_schema(path, index, version):
    obj = documents(path)[index]
    # Raises on any error, on an unknown field (strict), and on a kind it has no schema for.
    checked = kubernetes_validate.validate(obj, version, strict=True)
    assert checked == version  # validated against that very version, not an older fallback


def _mutate_container_field(obj):
    obj["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "IfNotPresent"


def _mutate_replicas_type(obj):
    obj["spec"]["replicas"] = "two"


def _mutate_configmap_number(obj):
    obj["data"]["LEASE_SECONDS"] = 30  # an unquoted number: a ConfigMap holds only strings


def _mutate_env_number(obj):
    obj["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = 8000


def _mutate_misplaced_field(obj):
    spec = obj["spec"]["template"]["spec"]
    spec["containers"][0]["terminationGracePeriodSeconds"] = spec.pop(
        "terminationGracePeriodSeconds"
    )


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize(
    ("filename", "kind", "mutate", "field"),
    [
        ("worker-gpu.yaml", "Deployment", _mutate_container_field, "imagePullPolicyy"),
        ("api.yaml", "Deployment", _mutate_replicas_type, "two"),
        ("configmap.yaml", "ConfigMap", _mutate_configmap_number, "30"),
        ("api.yaml", "Deployment", _mutate_env_number, "8000"),
        ("worker-gpu.yaml", "Deployment", _mutate_misplaced_field, "terminationGracePeriodSeconds"),
    ],
    ids=["unknown-field", "replicas-not-a-number", "configmap-number", "env-number", "misplaced"],
)
def test_the_validator_rejects_a_broken_manifest(filename, kind, mutate, field):
    (obj,) = [o for o in documents(KUBE / filename) if o["kind"] == kind]
    kubernetes_validate.validate(obj, K8S_VERSIONS[-1], strict=True)  # the real one passes
    broken = copy.deepcopy(obj)
    mutate(broken)
    with pytest.raises(kubernetes_validate.ValidationError) as caught:
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)
    assert field in caught.value.message


@pytest.mark.usefixtures("offline")
def test_strict_mode_is_what_catches_an_unknown_field():
    (obj,) = documents(KUBE / "worker-gpu.yaml")
    broken = copy.deepcopy(obj)
    _mutate_container_field(broken)
    kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=False)  # lenient: passes


# --- the KEDA ScaledObject (a custom resource: read, not validated) --------------------------


def test_the_validator_does_not_know_keda_so_the_scaledobject_is_read_instead(keda):
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(keda, K8S_VERSIONS[-1], strict=True)


def test_the_scaledobject_scales_the_gpu_worker_deployment(keda, applied):
    assert (keda["apiVersion"], keda["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    spec = keda["spec"]
    target = spec["scaleTargetRef"]
    assert target.get("apiVersion", "apps/v1") == "apps/v1"
    assert target.get("kind", "Deployment") == "Deployment"
    deployment = of_kind(applied, "Deployment")[target["name"]]
    # a job per card of a pod
    (trigger,) = spec["triggers"]
    assert float(trigger["metadata"]["threshold"]) == gpu_cards(deployment)
    assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    assert set(spec) <= {
        "scaleTargetRef",
        "minReplicaCount",
        "maxReplicaCount",
        "pollingInterval",
        "cooldownPeriod",
        "idleReplicaCount",
        "fallback",
        "advanced",
        "triggers",
    }


def test_the_scaledobject_reads_the_queued_jobs_from_prometheus(keda):
    (trigger,) = keda["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    meta = trigger["metadata"]
    assert "fairgpu_jobs_queued" in meta["query"]
    assert float(meta["threshold"]) > 0
    assert isinstance(meta["threshold"], str)  # KEDA's trigger metadata is strings only
    server = urlparse(meta["serverAddress"])
    assert server.scheme == "http" and server.hostname is not None
    assert server.hostname.endswith(".svc"), "Prometheus is reached by its Service's name"


#: One queue's term of the trigger's query: a gauge taken once over the API replicas.
QUERY_TERM = re.compile(r"sum\(max by \(queue\) \((fairgpu_\w+)\)\)")


def scaled_to(query: str, gauges: dict[str, float]) -> float:
    """The trigger's query worked out for given values of each gauge (one queue, one replica)."""
    arithmetic = QUERY_TERM.sub(lambda term: repr(gauges[term.group(1)]), query)
    first, *rest = re.split(r"\s*([+-])\s*", arithmetic.strip())  # a sum of terms, nothing else
    total = float(first)
    for sign, value in zip(rest[::2], rest[1::2], strict=True):
        total += float(value) if sign == "+" else -float(value)
    return total


def test_the_scaledobject_asks_no_worker_for_jobs_a_limit_holds_back(keda):
    query = keda["spec"]["triggers"][0]["metadata"]["query"]
    # Five queued, three of them held by their accounts' limits, one running: a worker each for
    # the two that could start and the one that runs; none for the held three.
    running_and_startable = {
        "fairgpu_jobs_queued": 5.0,
        "fairgpu_jobs_held_by_limit": 3.0,
        "fairgpu_jobs_in_flight": 1.0,
    }
    assert scaled_to(query, running_and_startable) == 3.0
    only_held = {**running_and_startable, "fairgpu_jobs_queued": 3.0, "fairgpu_jobs_in_flight": 0}
    assert scaled_to(query, only_held) == 0.0


def test_the_scaledobject_queries_only_gauges_the_api_exports(keda):
    source = (ROOT / "app" / "api" / "collector.py").read_text()
    gauges = set(re.findall(r'GaugeMetricFamily\(\s*"(fairgpu_\w+)"', source))
    queried = set(re.findall(r"fairgpu_\w+", keda["spec"]["triggers"][0]["metadata"]["query"]))
    assert queried and queried <= gauges, queried - gauges


# --- how the objects fit together ------------------------------------------------------------


def test_each_workload_selects_exactly_its_own_pods(applied):
    loads = workloads(applied)
    for name, load in loads.items():
        selector = load["spec"]["selector"]["matchLabels"]
        for other_name, other in loads.items():
            labels = other["spec"]["template"]["metadata"]["labels"]
            selects = selector.items() <= labels.items()
            assert selects == (other_name == name), (name, other_name)


def test_each_service_reaches_one_workload_on_a_named_container_port(applied):
    for name, service in of_kind(applied, "Service").items():
        selector = service["spec"]["selector"]
        reached = [
            load
            for load in workloads(applied).values()
            if selector.items() <= load["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(reached) == 1, name
        ports = {p["name"]: p["containerPort"] for p in container(reached[0])["ports"]}
        for port in service["spec"]["ports"]:
            assert ports[port["targetPort"]] == port["port"], name


def test_each_statefulset_is_named_by_a_headless_service_that_resolves_before_ready(applied):
    services = of_kind(applied, "Service")
    for name, statefulset in of_kind(applied, "StatefulSet").items():
        service = services[statefulset["spec"]["serviceName"]]
        assert service["spec"]["clusterIP"] == "None", name
        assert service["spec"]["publishNotReadyAddresses"] is True, name


def test_every_configmap_secret_and_volume_a_pod_uses_exists(applied, secrets):
    for name, load in workloads(applied).items():
        spec = pod_spec(load)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        claims = {c["metadata"]["name"] for c in load["spec"].get("volumeClaimTemplates", [])}
        for box in spec["containers"]:
            for source in box.get("envFrom", []):
                if "configMapRef" in source:
                    assert ("ConfigMap", source["configMapRef"]["name"]) in applied, name
                else:
                    assert source["secretRef"]["name"] in secrets, name
            for mount in box.get("volumeMounts", []):
                assert mount["name"] in volumes or mount["name"] in claims, (name, mount)
        for volume in volumes.values():
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in applied, name
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets, name


def test_every_pod_disruption_budget_covers_a_workload(applied):
    loads = workloads(applied)
    for name, budget in of_kind(applied, "PodDisruptionBudget").items():
        selector = budget["spec"]["selector"]["matchLabels"]
        assert any(
            selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
            for w in loads.values()
        ), name


# --- the fairgpu pods ------------------------------------------------------------------------


def test_fairgpu_runs_the_two_compose_images_as_compose_runs_them(applied, compose_services):
    loads = fairgpu_workloads(applied)
    assert set(loads) == set(COMPOSE_TWINS)
    for name, twin in COMPOSE_TWINS.items():
        box = container(loads[name])
        assert box["image"] == compose_services[twin]["image"], name
        assert box["command"] == [str(arg) for arg in compose_services[twin]["command"]], name


def gpu_cards(load: dict[str, Any]) -> int:
    """The cards a GPU worker pod asks for: all of one node's."""
    cards = container(load)["resources"]["limits"][GPU_RESOURCE]
    assert isinstance(cards, int) and cards >= 1
    return cards


def test_only_the_gpu_workers_run_the_gpu_image_and_ask_for_gpus(applied, second_class):
    loads = {**fairgpu_workloads(applied), "worker-gpu-small": second_class}
    for name, load in loads.items():
        box = container(load)
        limits = box.get("resources", {}).get("limits", {})
        requests = box.get("resources", {}).get("requests", {})
        if name.startswith("worker-gpu"):
            assert box["image"] == "fairgpu:gpu", name
            assert requests.get(GPU_RESOURCE, limits[GPU_RESOURCE]) == gpu_cards(load), name
        else:
            assert box["image"] == "fairgpu:cpu", name
            assert GPU_RESOURCE not in limits and GPU_RESOURCE not in requests, name


def gpu_host_pods(load: dict[str, Any]) -> dict[str, str]:
    """The labels by which one GPU host pod keeps another off its node (its anti-affinity)."""
    (term,) = pod_spec(load)["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"  # one per node
    assert set(term["labelSelector"]) == {"matchLabels"}
    labels: dict[str, str] = term["labelSelector"]["matchLabels"]
    return labels


def test_one_gpu_pod_per_node_whatever_its_class(applied, second_class):
    # Two pods on one node would both number their cards 0, 1, ... on one host of the fleet.
    loads = [applied["Deployment", "worker-gpu"], second_class]
    for load in loads:
        for other in loads:
            own = other["spec"]["template"]["metadata"]["labels"]
            assert gpu_host_pods(load).items() <= own.items()
    # and no other pod is kept away
    for name, load in workloads(applied).items():
        if name != "worker-gpu":
            labels = load["spec"]["template"]["metadata"]["labels"]
            assert not gpu_host_pods(loads[0]).items() <= labels.items(), name


@pytest.mark.parametrize("cards", [1, 2, 8])
def test_the_launcher_runs_a_worker_on_each_card_the_device_plugin_gives(applied, secrets, cards):
    load = applied["Deployment", "worker-gpu"]
    box = container(load)
    assert box["command"] == ["python", "-m", "app.worker.host"]
    env = container_env(box, applied, secrets, pod_name="worker-gpu-abc12", node_name="n-1")
    # The device plugin shows the pod the node's cards; the launcher gives each worker its own.
    assert not {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HOST_GPU_ID"} & set(env)
    workers = worker_envs(env, lambda: nvidia_smi_listing(cards))
    assert sorted(workers) == list(range(cards))
    for card, own in workers.items():
        assert gpu.choose_device(own, lambda: 1) == gpu.Device(gpu_id=card)
        assert own["WORKER_NAME"] == f"gpu{card}@worker-gpu-abc12"
        assert own["WORKER_HOST"] == "n-1"


def test_a_gpu_rollout_never_waits_for_a_node_that_the_other_pods_hold(applied):
    strategy = applied["Deployment", "worker-gpu"]["spec"]["strategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"]["maxSurge"] == 0
    assert strategy["rollingUpdate"]["maxUnavailable"] >= 1


def test_pods_that_need_no_gpu_hide_every_gpu(applied, secrets):
    for name in ("worker-cpu", "beat", "webhooks"):
        env = container_env(container(applied["Deployment", name]), applied, secrets)
        assert gpu.choose_device(env, lambda: 2) == gpu.CPU, name


def test_workers_outlast_the_shutdown_grace_and_the_cancel_grace(
    applied, secrets, compose_services, monkeypatch
):
    for name in WORKERS:
        load = applied["Deployment", name]
        settings = settings_in(container_env(container(load), applied, secrets), monkeypatch)
        grace = pod_spec(load)["terminationGracePeriodSeconds"]
        assert grace > settings.shutdown_grace_s + settings.cancel_grace_s, name
        twin = compose_services[COMPOSE_TWINS[name]]
        assert grace >= grace_s(twin["stop_grace_period"]), name


def test_the_webhook_sender_has_its_compose_grace(applied, compose_services):
    grace = pod_spec(applied["Deployment", "webhooks"])["terminationGracePeriodSeconds"]
    assert grace >= grace_s(compose_services["webhooks"]["stop_grace_period"])


def test_workers_take_jobs_from_both_queues(applied, secrets, monkeypatch):
    for name in WORKERS:
        env = container_env(container(applied["Deployment", name]), applied, secrets)
        assert env["WORKER_QUEUES"] == "short,long", name
        assert settings_in(env, monkeypatch).worker_queues == ["short", "long"], name


def test_every_worker_pod_gets_a_name_of_its_own(applied, secrets, monkeypatch):
    for name in WORKERS:
        box = container(applied["Deployment", name])
        names = [var["name"] for var in box["env"]]
        # $(POD_NAME) is expanded only from a variable defined before it.
        assert names.index("POD_NAME") < names.index("WORKER_NAME"), name
        assert "$(POD_NAME)" in next(v["value"] for v in box["env"] if v["name"] == "WORKER_NAME")
        first = container_env(box, applied, secrets, pod_name=f"{name}-abc12")
        second = container_env(box, applied, secrets, pod_name=f"{name}-def34")
        assert first["WORKER_NAME"] != second["WORKER_NAME"]
        if name == "worker-gpu":  # the launcher's workers, one per card
            first = worker_envs(first, lambda: nvidia_smi_listing(1))[0]
        worker_name = settings_in(first, monkeypatch).worker_name
        assert worker_name.endswith(f"@{name}-abc12") and "%h" not in worker_name
        assert "{" not in worker_name


# --- a mixed fleet: each worker's host and class ----------------------------------------------

MIXED_CATALOG = (
    '{"big": {"memory_gb": 80, "price": 2.0, "match": "A100"},'
    ' "small": {"memory_gb": 24, "price": 1.0, "match": "L4"}}'
)


@pytest.fixture(scope="module")
def second_class() -> dict[str, Any]:
    (obj,) = documents(CLASS_FILE)
    return obj


def worker_env(load, applied, secrets, pod: str, node: str) -> dict[str, str]:
    env = container_env(container(load), applied, secrets, pod_name=pod, node_name=node)
    return {**env, "GPU_CLASSES": MIXED_CATALOG}


def test_every_worker_pod_is_on_the_host_of_its_node(applied, secrets, second_class, monkeypatch):
    from app.fleet.worker_class import worker_host

    loads = [applied["Deployment", name] for name in WORKERS] + [second_class]
    for load in loads:
        name = load["metadata"]["name"]
        [var] = [v for v in container(load)["env"] if v["name"] == "WORKER_HOST"]
        assert var["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}, name
        hosts = [
            worker_host(settings_in(worker_env(load, applied, secrets, pod, node), monkeypatch))
            for pod, node in (("p-1", "gpu-node-1"), ("p-2", "gpu-node-1"), ("p-3", "gpu-node-2"))
        ]
        # two cards of one node are one host; another node is another
        assert hosts == ["gpu-node-1", "gpu-node-1", "gpu-node-2"], name


def test_the_first_gpu_worker_finds_its_class_from_its_card(applied, secrets, monkeypatch):
    from app.fleet.catalog import Catalog
    from app.fleet.worker_class import worker_class

    load = applied["Deployment", "worker-gpu"]
    settings = settings_in(worker_env(load, applied, secrets, "p-1", "n-1"), monkeypatch)
    assert settings.worker_gpu_class is None
    catalog = Catalog.from_setting(settings.gpu_classes)
    for card, expected in (("NVIDIA A100-SXM4-80GB", "big"), ("NVIDIA L4", "small")):
        assert worker_class(catalog, card, None, settings.worker_gpu_class).name == expected


def test_the_second_class_runs_on_its_node_pool_as_its_class(
    second_class, applied, secrets, monkeypatch
):
    from app.fleet.catalog import Catalog
    from app.fleet.worker_class import worker_class

    spec = pod_spec(second_class)
    assert list(spec["nodeSelector"]) == ["nvidia.com/gpu.product"]
    env = worker_env(second_class, applied, secrets, "p-1", "n-1")
    settings = settings_in(env, monkeypatch)
    catalog = Catalog.from_setting(settings.gpu_classes)
    # given, its class holds whatever the card's name says
    found = worker_class(catalog, "NVIDIA A100-SXM4-80GB", None, settings.worker_gpu_class)
    assert found.name == "small"
    # its own pods only: the two Deployments never adopt each other's
    ours = second_class["spec"]["selector"]["matchLabels"]
    theirs = applied["Deployment", "worker-gpu"]["spec"]["selector"]["matchLabels"]
    assert ours != theirs
    assert ours.items() <= second_class["spec"]["template"]["metadata"]["labels"].items()
    assert (
        not ours.items()
        <= applied["Deployment", "worker-gpu"]["spec"]["template"]["metadata"]["labels"].items()
    )


def test_the_second_class_is_worker_gpu_but_for_its_name_class_and_node_pool(second_class, applied):
    first = copy.deepcopy(applied["Deployment", "worker-gpu"])
    second = copy.deepcopy(second_class)
    assert second["metadata"]["name"] == "worker-gpu-small"
    for load, component in ((first, "worker-gpu"), (second, "worker-gpu-small")):
        load["metadata"]["name"] = "NAME"
        for labels in (
            load["metadata"]["labels"],
            load["spec"]["selector"]["matchLabels"],
            load["spec"]["template"]["metadata"]["labels"],
        ):
            assert labels["component"] == component
            labels["component"] = "COMPONENT"
    pod_spec(second).pop("nodeSelector")
    box = container(second)
    box["env"] = [v for v in box["env"] if v["name"] != "WORKER_GPU_CLASS"]
    # each pool's nodes have their own count of cards
    for load in (first, second):
        container(load)["resources"]["limits"][GPU_RESOURCE] = "CARDS"
    assert second == first


def test_beat_runs_once_and_is_stopped_before_its_successor_starts(applied, compose_services):
    beat = applied["Deployment", "beat"]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert container(beat)["command"] == compose_services["beat"]["command"]


def test_the_api_listens_on_port_8000_of_every_interface(applied, secrets, monkeypatch):
    box = container(applied["Deployment", "api"])
    settings = settings_in(container_env(box, applied, secrets), monkeypatch)
    assert (settings.host, settings.port) == ("0.0.0.0", 8000)
    assert [p["containerPort"] for p in box["ports"]] == [settings.port]
    (port,) = applied["Service", "api"]["spec"]["ports"]
    assert port["port"] == settings.port


def test_the_api_probes_ask_health_on_the_container_port(applied, secrets, monkeypatch):
    box = container(applied["Deployment", "api"])
    settings = settings_in(container_env(box, applied, secrets), monkeypatch)
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert box[probe]["httpGet"]["path"] == "/health", probe
        assert probe_port(box, box[probe]) == settings.port, probe


def test_the_api_serves_the_path_the_probes_ask():
    from app.api.factory import create_app

    assert "get" in create_app(Settings()).openapi()["paths"]["/health"]


def test_the_api_probes_wait_out_a_sentinel_failover(applied):
    # /health is a 503 while the Sentinels elect a new primary: that must neither take every API
    # pod out of the Service nor restart them.
    down_after_s = int(configmap(applied, "redis-config")["DOWN_AFTER_MS"]) / 1000
    box = container(applied["Deployment", "api"])
    for probe in ("readinessProbe", "livenessProbe"):
        window = box[probe]["periodSeconds"] * box[probe]["failureThreshold"]
        assert window >= 3 * down_after_s, probe
    assert box["livenessProbe"]["failureThreshold"] > box["readinessProbe"]["failureThreshold"]


def test_every_variable_a_fairgpu_container_sees_is_a_setting(applied, secrets):
    known = setting_names() | NON_SETTINGS
    for name, load in fairgpu_workloads(applied).items():
        env = container_env(container(load), applied, secrets)
        unknown = {
            var for var in env if var not in known and not var.startswith(NON_SETTING_PREFIXES)
        }
        assert not unknown, f"{name} sets {unknown}, which no setting reads"


def test_every_fairgpu_pod_shares_the_config_and_sees_only_what_it_sets(applied):
    for name, load in fairgpu_workloads(applied).items():
        sources = container(load)["envFrom"]
        assert {"configMapRef": {"name": "fairgpu-config"}} in sources, name
        assert {"secretRef": {"name": "fairgpu-secrets"}} in sources, name
        # No Service links: a Service named `api` would otherwise add API_PORT and the like.
        assert pod_spec(load)["enableServiceLinks"] is False, name


def test_the_shared_config_carries_what_compose_shares(applied, secrets, compose_services):
    shared = {**configmap(applied, "fairgpu-config"), **secrets["fairgpu-secrets"]}
    compose_env = compose_services["api"]["environment"]
    shared_in_compose = {"REDIS_URL", "REDIS_SENTINELS", "DATABASE_URL", "USERS_FILE"}
    shared_in_compose |= {"LEASE_SECONDS", "WEBHOOK_SECRET"}
    assert shared_in_compose <= set(compose_env)
    assert shared_in_compose <= set(shared)
    assert shared["LEASE_SECONDS"] == compose_env["LEASE_SECONDS"]


def test_the_secrets_hold_the_database_url_and_the_webhook_secret(secrets, applied, monkeypatch):
    assert set(secrets["fairgpu-secrets"]) == {"DATABASE_URL", "WEBHOOK_SECRET"}
    assert not set(secrets["fairgpu-secrets"]) & set(configmap(applied, "fairgpu-config"))
    env = {**configmap(applied, "fairgpu-config"), **secrets["fairgpu-secrets"]}
    settings = settings_in(env, monkeypatch)
    assert urlparse(settings.database).scheme == "postgresql+psycopg"
    assert signer(settings) is None  # the placeholder: no webhooks until a real key is set


def test_the_secret_example_is_marked_as_such():
    header = SECRETS_EXAMPLE.read_text().split("apiVersion", 1)[0]
    assert "kubectl -n fairgpu create secret generic fairgpu-secrets" in header
    assert "kubectl -n fairgpu create secret generic fairgpu-accounts" in header


def test_every_fairgpu_pod_mounts_the_accounts_file_read_only(applied, secrets, tmp_path):
    users_file = Path(configmap(applied, "fairgpu-config")["USERS_FILE"])
    for name, load in fairgpu_workloads(applied).items():
        mounts = [
            m for m in container(load)["volumeMounts"] if m["mountPath"] == str(users_file.parent)
        ]
        assert len(mounts) == 1 and mounts[0]["readOnly"] is True, name
        (volume,) = [v for v in pod_spec(load)["volumes"] if v["name"] == mounts[0]["name"]]
        assert volume["secret"]["secretName"] == "fairgpu-accounts", name
    # The example accounts file loads, and lists keys only by their digests.
    example = tmp_path / users_file.name
    example.write_text(secrets["fairgpu-accounts"][users_file.name])
    accounts = Accounts.load(example).all()
    assert accounts and all(k.startswith("sha256:") for a in accounts for k in a.api_keys)
    assert any(a.admin for a in accounts)


def test_fairgpu_pods_run_as_the_images_user(applied):
    uid = re.search(r"useradd [^\n]*--uid (\d+)", DOCKERFILE.read_text())
    assert uid is not None
    for name, load in fairgpu_workloads(applied).items():
        context = pod_spec(load)["securityContext"]
        assert context["runAsNonRoot"] is True, name
        assert context["runAsUser"] == int(uid.group(1)), name


# --- script jobs: the sandbox and the environment cache --------------------------------------

#: Binary quantity suffixes of a volume's size limit.
QUANTITY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity_bytes(text: str) -> int:
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)", text)
    assert match, text
    return int(match.group(1)) * QUANTITY[match.group(2)]


def test_every_worker_pod_lets_bubblewrap_nest_and_nothing_more(applied):
    for name in WORKERS:
        load = applied["Deployment", name]
        spec = pod_spec(load)
        # its own user namespace: its users are no users of the node, and /proc may be unmasked
        assert spec["hostUsers"] is False, name
        context = spec["securityContext"]
        assert context["runAsNonRoot"] is True, name
        assert context["seccompProfile"]["type"] in ("Unconfined", "Localhost"), name
        assert context["appArmorProfile"] == {"type": "Unconfined"}, name
        box = container(load)["securityContext"]
        assert box["procMount"] == "Unmasked", name
        assert box["allowPrivilegeEscalation"] is False, name
        assert box["capabilities"] == {"drop": ["ALL"]}, name
        assert not box.get("privileged", False), name


def test_every_worker_pod_gets_the_tun_device_its_filtered_network_needs(applied):
    # pasta makes the filtered network of builds and networked scripts with /dev/net/tun.
    for name in WORKERS:
        load = applied["Deployment", name]
        volumes = {volume["name"]: volume for volume in pod_spec(load)["volumes"]}
        assert volumes["tun"]["hostPath"] == {"path": "/dev/net/tun", "type": "CharDevice"}, name
        mounts = {mount["name"]: mount for mount in container(load)["volumeMounts"]}
        assert mounts["tun"]["mountPath"] == "/dev/net/tun", name


def test_pods_that_run_no_script_keep_the_runtimes_defaults(applied):
    for name, load in fairgpu_workloads(applied).items():
        if name in WORKERS:
            continue
        spec = pod_spec(load)
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert "appArmorProfile" not in spec["securityContext"], name
        assert "procMount" not in container(load).get("securityContext", {}), name


def test_every_worker_keeps_environments_in_a_bounded_volume_of_its_pod(
    applied, secrets, monkeypatch
):
    image_cache = re.search(r"SCRIPT_ENV_CACHE_DIR=(\S+)", DOCKERFILE.read_text())
    assert image_cache is not None
    for name in WORKERS:
        load = applied["Deployment", name]
        settings = settings_in(container_env(container(load), applied, secrets), monkeypatch)
        assert str(settings.script_env_cache_dir) == image_cache.group(1), name
        (mount,) = [
            m
            for m in container(load)["volumeMounts"]
            if m["mountPath"] == str(settings.script_env_cache_dir)
        ]
        assert not mount.get("readOnly", False), name
        (volume,) = [v for v in pod_spec(load)["volumes"] if v["name"] == mount["name"]]
        # the cache evicts before the kubelet would evict the pod for its volume
        limit = quantity_bytes(volume["emptyDir"]["sizeLimit"])
        assert 0 < settings.script_env_cache_bytes < limit, name


def test_the_gpu_worker_builds_on_the_images_torch_base_as_compose_does(
    applied, secrets, compose_services, monkeypatch
):
    env = container_env(container(applied["Deployment", "worker-gpu"]), applied, secrets)
    twin = compose_services[COMPOSE_TWINS["worker-gpu"]]["environment"]
    assert env["SCRIPT_BASE_ENV"] == twin["SCRIPT_BASE_ENV"]
    assert settings_in(env, monkeypatch).script_base_env == Path(twin["SCRIPT_BASE_ENV"])
    cpu = container_env(container(applied["Deployment", "worker-cpu"]), applied, secrets)
    assert "SCRIPT_BASE_ENV" not in cpu


# --- Redis and its Sentinels -----------------------------------------------------------------


def stable_names(statefulset: dict[str, Any]) -> list[str]:
    """<pod>.<headless Service> of each pod of a StatefulSet."""
    name, spec = statefulset["metadata"]["name"], statefulset["spec"]
    return [f"{name}-{n}.{spec['serviceName']}" for n in range(spec["replicas"])]


def test_redis_is_one_primary_two_replicas_and_three_sentinels(applied):
    assert applied["StatefulSet", "redis"]["spec"]["replicas"] == 3
    sentinels = applied["StatefulSet", "redis-sentinel"]["spec"]["replicas"]
    quorum = int(configmap(applied, "redis-config")["QUORUM"])
    assert sentinels == 3
    assert sentinels // 2 < quorum <= sentinels  # a majority must agree


def test_fairgpu_finds_the_primary_through_every_sentinel(applied, monkeypatch):
    sentinel_set = applied["StatefulSet", "redis-sentinel"]
    (port,) = container(sentinel_set)["ports"]
    expected = [(host, port["containerPort"]) for host in stable_names(sentinel_set)]
    settings = settings_in(configmap(applied, "fairgpu-config"), monkeypatch)
    assert settings.sentinels == expected
    redis_config = configmap(applied, "redis-config")
    assert redis_config["SENTINELS"] == configmap(applied, "fairgpu-config")["REDIS_SENTINELS"]
    assert settings.redis_sentinel_master == redis_config["MASTER_NAME"]
    assert settings.min_replicas == 1  # a submit is answered once a replica has it


def test_the_start_scripts_know_every_server_and_the_first_is_the_first_primary(applied):
    redis_set = applied["StatefulSet", "redis"]
    (port,) = container(redis_set)["ports"]
    names = stable_names(redis_set)
    config = configmap(applied, "redis-config")
    assert config["SERVERS"] == ",".join(f"{name}:{port['containerPort']}" for name in names)
    assert config["FIRST_PRIMARY"] == names[0]


def test_each_redis_keeps_its_append_only_file_on_a_volume_of_its_own(applied):
    redis_set = applied["StatefulSet", "redis"]
    (claim,) = redis_set["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container(redis_set)["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == "/data"


FAKE_REDIS_CLI = """#!/bin/sh
# redis-cli -h HOST -p PORT --raw sentinel get-master-addr-by-name NAME
echo "$2" >> "$FAKE_DIR/asked"
line="$(grep "^$2 " "$FAKE_DIR/answers" | head -n 1)"
if [ -z "$line" ]; then
  echo "Could not connect to Redis at $2:$4: Connection refused" >&2
  exit 1
fi
printf '%s\\n' "${line#* }" 6379
"""
FAKE_REDIS_SERVER = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_DIR/args"
if [ "${2:-}" = "--sentinel" ]; then cp "$1" "$FAKE_DIR/conf"; fi
"""


def run_start_script(applied, tmp_path, workload: str, pod: str, answers: dict[str, str]):
    """Run a Redis pod's start script with stand-ins for redis-cli and redis-server: `answers`
    is what each Sentinel (by host) says the primary is; the others do not answer."""
    fakes = tmp_path / "bin"
    fakes.mkdir()
    for name, text in (("redis-cli", FAKE_REDIS_CLI), ("redis-server", FAKE_REDIS_SERVER)):
        (fakes / name).write_text(text)
        (fakes / name).chmod(0o755)
    (tmp_path / "answers").write_text("".join(f"{h} {a}\n" for h, a in answers.items()))
    box = container(applied["StatefulSet", workload])
    scripts = tmp_path / "scripts"  # the ConfigMap's files, as the pod mounts them
    scripts.mkdir()
    for name, text in configmap(applied, "redis-scripts").items():
        (scripts / name).write_text(text)
    script = scripts / Path(box["command"][-1]).name
    env = container_env(box, applied, {}, pod_name=pod)
    env.update(PATH=f"{fakes}:/usr/bin:/bin", FAKE_DIR=str(tmp_path))
    if "SENTINEL_CONF" in env:
        env["SENTINEL_CONF"] = str(tmp_path / "sentinel.conf")
    done = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    asked = tmp_path / "asked"
    return (
        (tmp_path / "args").read_text().splitlines(),
        asked.read_text().split() if asked.exists() else [],
    )


def option(args: list[str], name: str, count: int = 1) -> list[str] | None:
    if name not in args:
        return None
    at = args.index(name)
    return args[at + 1 : at + 1 + count]


S0, S1, S2 = (f"redis-sentinel-{n}.redis-sentinel" for n in range(3))
R0, R1, R2 = (f"redis-{n}.redis" for n in range(3))


@pytest.mark.parametrize(
    ("pod", "answers", "replica_of"),
    [
        ("redis-0", {}, None),  # the very first start: redis-0 is the primary
        ("redis-1", {}, R0),
        ("redis-0", {S1: R2}, R2),  # it was failed over while this server was away
        ("redis-2", {S0: R2}, None),  # the Sentinels name this very server
        ("redis-1", {S0: "ERR No such master", S2: R2}, R2),
        ("redis-0", {R1: "slave", R2: "master"}, R2),  # no Sentinel up: the servers say
        ("redis-2", {R0: "slave", R1: "slave"}, R0),
        ("redis-1", {S0: R2, R0: "master"}, R2),  # the Sentinels have the last word
    ],
    ids=[
        "first-primary",
        "first-replica",
        "after-a-failover",
        "named-primary",
        "an-error-is-no-answer",
        "no-sentinel-a-primary-server",
        "no-sentinel-no-primary-server",
        "sentinels-first",
    ],
)
def test_a_redis_server_follows_the_primary_the_sentinels_name(
    applied, tmp_path, pod, answers, replica_of
):
    args, asked = run_start_script(applied, tmp_path, "redis", pod, answers)
    assert option(args, "--replicaof", 2) == (None if replica_of is None else [replica_of, "6379"])
    assert f"{pod}.redis" not in asked
    assert option(args, "--replica-announce-ip") == [f"{pod}.redis"]
    assert option(args, "--appendonly") == ["yes"]
    assert option(args, "--appendfsync") == ["everysec"]
    assert option(args, "--dir") == ["/data"]
    assert option(args, "--min-replicas-to-write") == ["1"]


@pytest.mark.parametrize(
    ("pod", "answers", "monitored"),
    [
        ("redis-sentinel-0", {}, R0),
        ("redis-sentinel-0", {S2: R1}, R1),
        # A Sentinel never asks itself: what it knew before its restart is gone.
        ("redis-sentinel-1", {S1: R2}, R0),
        ("redis-sentinel-2", {R0: "slave", R1: "master"}, R1),  # every Sentinel restarted
    ],
    ids=["first-start", "after-a-failover", "never-itself", "no-other-sentinel"],
)
def test_a_sentinel_monitors_the_primary_the_others_name(
    applied, tmp_path, pod, answers, monitored
):
    args, asked = run_start_script(applied, tmp_path, "redis-sentinel", pod, answers)
    assert args == [str(tmp_path / "sentinel.conf"), "--sentinel"]
    assert f"{pod}.redis-sentinel" not in asked
    conf = (tmp_path / "conf").read_text().splitlines()
    config = configmap(applied, "redis-config")
    master, quorum = config["MASTER_NAME"], config["QUORUM"]
    assert conf[0] == "port 26379"
    assert conf.index("sentinel resolve-hostnames yes") < conf.index(
        f"sentinel monitor {master} {monitored} 6379 {quorum}"
    )
    assert f"sentinel announce-ip {pod}.redis-sentinel" in conf
    assert f"sentinel down-after-milliseconds {master} {config['DOWN_AFTER_MS']}" in conf


# --- what the files must not contain ---------------------------------------------------------


PUBLISHED = [*MANIFESTS, KUSTOMIZATION, DOCS]


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: str(p.relative_to(ROOT)))
def test_files_name_no_registry_and_no_url_outside_the_cluster(path):
    text = path.read_text().lower()
    hosts = set(PUBLIC_HOST.findall(text)) - API_NAMES
    assert not hosts, f"{path.name} names {hosts}"
    for url in re.findall(r"https?://[^\s`'\")]+", text):
        host = urlparse(url).hostname or ""
        assert host == "127.0.0.1" or host.endswith(".svc"), f"{path.name}: {url}"


def test_images_are_named_without_a_registry_host(applied):
    for name, load in workloads(applied).items():
        for box in pod_spec(load)["containers"]:
            first = box["image"].split("/")[0]
            assert "/" not in box["image"] or not ("." in first or ":" in first), name


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: str(p.relative_to(ROOT)))
def test_files_hold_no_absolute_path_of_this_machine(path):
    text = path.read_text()
    # Paths inside the containers are fine, even where a checkout happens to live at one of them.
    local = {str(ROOT), str(ROOT.parent), str(Path.home())} - {"/", "/scripts", *IMAGE_PATHS}
    for prefix in local:
        assert not re.search(re.escape(prefix) + r"(/|\b)", text), f"{path.name} names {prefix}"
