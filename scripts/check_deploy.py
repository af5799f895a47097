#!/usr/bin/env python3
"""Checks that the deployment files agree with each other and with the server's defaults.

Ports, paths, probe targets, grace periods, environment variables and the CUDA architectures of
docker/Dockerfile.*, docker/rankd.yaml, docker/compose.yaml, docker/k8s/*.yaml and docs/deploy.md
against include/rankd/server/config.h and src/server. Prints every disagreement; exit 1 if any.
Needs python3 and its yaml module (Debian's python3-yaml, which yamllint brings).
"""
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARGIN_S = 5  # what every stop grace period leaves beyond drain + worker stop (+ preStop)
errors = []


def check(ok, message):
    if not ok:
        errors.append(message)


def read(rel):
    return (ROOT / rel).read_text()


def port(address):
    return int(str(address).rsplit(":", 1)[1])


def seconds(text):
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", str(text))
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0)


# The server: defaults (config.h), then the images' config (docker/rankd.yaml) over them.
header = read("include/rankd/server/config.h")


def default(field):
    m = re.search(r"\b%s = ([0-9.]+);" % field, header)
    return float(m.group(1))


image_config = yaml.safe_load(read("docker/rankd.yaml"))
server = image_config["server"]
workers = image_config.get("workers", {})
drain_s = server.get("drain_timeout_s", default("drain_timeout_s"))
worker_stop_s = workers.get("stop_timeout_s", default("stop_timeout_s"))
startup_s = workers.get("startup_timeout_s", default("startup_timeout_s"))
stop_s = drain_s + worker_stop_s + MARGIN_S
grpc, metrics = port(server["listen"]), port(server["metrics_listen"])
api = port(server["http_listen"])
keys_file = server["auth"]["api_keys_file"]
keys_dir, keys_name = keys_file.rsplit("/", 1)
model_dir = image_config["model"]["dir"]
scorer = re.search(r'kScorerServiceName\[\] = "([^"]+)"', read("src/server/serve.cc")).group(1)
check(server["listen"].startswith("0.0.0.0:") and keys_file,
      "docker/rankd.yaml: listen on 0.0.0.0 with server.auth.api_keys_file set")
check(("/opt/rankd/models/default" in read("docker/bundle_default_model.sh")) and
      model_dir == "/opt/rankd/models/default",
      "docker/rankd.yaml model.dir must be where bundle_default_model.sh copies the model")


def health_command(argv, where):
    """rankd-client health --target 127.0.0.1:GRPC --service SCORER."""
    check(argv[:2] == ["rankd-client", "health"], f"{where}: health check is not rankd-client health")
    flags = dict(zip(argv[2::2], argv[3::2]))
    check(port(flags.get("--target", ":0")) == grpc, f"{where}: health --target port is not {grpc}")
    check(flags.get("--service") == scorer, f"{where}: health --service is not {scorer}")


# Dockerfiles.
for name in ("docker/Dockerfile.cpu", "docker/Dockerfile.cuda"):
    text = read(name)
    expose = {int(p) for line in re.findall(r"^EXPOSE (.*)$", text, re.M) for p in line.split()}
    check(expose == {grpc, metrics, api}, f"{name}: EXPOSE {sorted(expose)}, not {[grpc, metrics, api]}")
    hc = re.search(r"^HEALTHCHECK (.*?)\\\n\s*CMD (\[.*\])$", text, re.M)
    check(hc is not None, f"{name}: no HEALTHCHECK")
    if hc:
        health_command(yaml.safe_load(hc.group(2)), name)
        start = re.search(r"--start-period=(\w+)", hc.group(1))
        check(start and seconds(start.group(1)) >= startup_s,
              f"{name}: HEALTHCHECK --start-period under workers.startup_timeout_s {startup_s}")
    check("--config\", \"/opt/rankd/configs/rankd.yaml\"" in text and
          "COPY docker/rankd.yaml /opt/rankd/configs/rankd.yaml" in text,
          f"{name}: the ENTRYPOINT must use the copied docker/rankd.yaml")
    check(re.search(r"^USER 65534:65534$", text, re.M), f"{name}: not USER 65534:65534")
    check("NVIDIA_VISIBLE_DEVICES" not in text, f"{name}: GPU selection belongs to the runtime")
    for n in re.findall(r"--stop-timeout (\d+)", text):
        check(int(n) >= stop_s, f"{name}: --stop-timeout {n} < {stop_s}")

arches = re.search(r'^ARG CUDA_ARCHITECTURES="([^"]+)"', read("docker/Dockerfile.cuda"), re.M)
deploy_md = read("docs/deploy.md")
check(arches and arches.group(1) in deploy_md,
      "docs/deploy.md must name Dockerfile.cuda's CUDA_ARCHITECTURES")
for script in ("docs/deploy.md", "scripts/docker_smoke.sh"):
    for n in re.findall(r"--stop-timeout (\d+)", read(script)):
        check(int(n) >= stop_s, f"{script}: --stop-timeout {n} < {stop_s}")

# Compose.
compose_text = read("docker/compose.yaml")
compose = yaml.safe_load(compose_text)
check(":?" not in compose_text, "docker/compose.yaml: ${VAR:?} fails `config` for every profile")
for var in sorted(set(re.findall(r"\$\{(\w+)", compose_text))):
    check(var in deploy_md, f"docs/deploy.md does not document {var} (docker/compose.yaml)")
for svc, image, needs_model in (("rankd-cpu", "cpu", False), ("rankd-cuda", "cuda", True)):
    s = compose["services"][svc]
    where = f"docker/compose.yaml {svc}"
    check(s["build"]["dockerfile"] == f"docker/Dockerfile.{image}", f"{where}: dockerfile")
    check(s.get("profiles") == [image], f"{where}: profiles is not [{image}]")
    targets = sorted(int(p.rsplit(":", 1)[1]) for p in s["ports"])
    check(targets == sorted([grpc, metrics, api]), f"{where}: container ports {targets}")
    check(seconds(s["stop_grace_period"]) >= stop_s, f"{where}: stop_grace_period < {stop_s} s")
    health_command(s["healthcheck"]["test"][1:], where)
    check(seconds(s["healthcheck"]["start_period"]) >= startup_s, f"{where}: start_period")
    check(f"rankd-keys:{keys_dir}:ro" in s["volumes"], f"{where}: keys not at {keys_dir}")
    if needs_model:
        check(s["command"][:2] == ["--model", "/model"] and
              any(v.endswith(":/model:ro") for v in s["volumes"]), f"{where}: model volume")
keygen = " ".join(compose["services"]["rankd-keys"]["command"])
check(f"/keys/{keys_name}" in keygen, f"docker/compose.yaml rankd-keys: does not write {keys_name}")
host_ports = [p.split(":")[0] for s in compose["services"].values() for p in s.get("ports", [])]
check(len(host_ports) == len(set(host_ports)), "docker/compose.yaml: a host port published twice")

# Kubernetes.
k8s = {}
for f in sorted((ROOT / "docker/k8s").glob("*.yaml")):
    if f.name in ("envoy.yaml", "kustomization.yaml"):
        continue
    for doc in yaml.safe_load_all(f.read_text()):
        k8s[(doc["kind"], doc["metadata"]["name"])] = doc
kustomization = yaml.safe_load(read("docker/k8s/kustomization.yaml"))
listed = set(kustomization["resources"])
on_disk = {f.name for f in (ROOT / "docker/k8s").glob("*.yaml")} - {"envoy.yaml",
                                                                    "kustomization.yaml"}
check(listed == on_disk, f"docker/k8s/kustomization.yaml resources {sorted(listed)}")

pod = k8s[("Deployment", "rankd")]["spec"]["template"]
c = pod["spec"]["containers"][0]
where = "docker/k8s/rankd.yaml"
cports = {p["name"]: p["containerPort"] for p in c["ports"]}
check(cports == {"grpc": grpc, "metrics": metrics, "http": api}, f"{where}: container ports {cports}")
check(pod["metadata"]["annotations"]["prometheus.io/port"] == str(metrics),
      f"{where}: prometheus.io/port")
for probe, service in (("startupProbe", ""), ("livenessProbe", ""), ("readinessProbe", scorer)):
    g = c[probe]["grpc"]
    check(g["port"] == grpc and g.get("service", "") == service, f"{where}: {probe} target")
startup = c["startupProbe"]
check(startup["periodSeconds"] * startup["failureThreshold"] >= startup_s,
      f"{where}: startupProbe allows less than workers.startup_timeout_s {startup_s}")
pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
check(pre_stop[0] == "sleep", f"{where}: preStop is not a sleep")
grace = pod["spec"]["terminationGracePeriodSeconds"]
check(grace >= int(pre_stop[1]) + stop_s,
      f"{where}: terminationGracePeriodSeconds {grace} < preStop + {stop_s}")
mounts = {m["name"]: m for m in c["volumeMounts"]}
volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
check(mounts["api-keys"]["mountPath"] == keys_dir, f"{where}: API keys not mounted at {keys_dir}")
check(f"--from-file={keys_name}=" in read("docker/k8s/rankd.yaml"), f"{where}: Secret's key name")
check("secret" in volumes["api-keys"], f"{where}: API keys not from a Secret")
check(c["args"][:2] == ["--model", "/model"] and mounts["model"]["mountPath"] == "/model",
      f"{where}: --model and the model mount differ")
check(c["securityContext"]["readOnlyRootFilesystem"] and mounts["tmp"]["mountPath"] == "/tmp",
      f"{where}: read-only root needs /tmp writable (the workers' sockets)")
check(pod["spec"]["securityContext"]["runAsUser"] == 65534, f"{where}: runAsUser is not 65534")
headless = k8s[("Service", "rankd-headless")]["spec"]
check(headless["clusterIP"] == "None", f"{where}: rankd-headless is not headless")
check({p["port"] for p in headless["ports"]} == {grpc, metrics, api}, f"{where}: headless ports")
hpa = k8s[("HorizontalPodAutoscaler", "rankd")]["spec"]
for m in hpa["metrics"]:
    name = m["pods"]["metric"]["name"]
    check(f'"{name}"' in read("src/server/metrics.cc"), f"{where}: HPA metric {name} unknown")

# Envoy: listens where its Service points, routes to the headless Service's gRPC port, checks the
# same health service.
envoy = yaml.safe_load(read("docker/k8s/envoy.yaml"))
edep = k8s[("Deployment", "envoy")]["spec"]["template"]["spec"]
ec = edep["containers"][0]
eports = {p["name"]: p["containerPort"] for p in ec["ports"]}
listeners = {l["name"]: l["address"]["socket_address"]["port_value"]
             for l in envoy["static_resources"]["listeners"]}
check(listeners == {"grpc": eports["grpc"], "health": eports["health"]},
      f"docker/k8s/envoy.yaml: listeners {listeners} vs container ports {eports}")
check(ec["volumeMounts"][0]["mountPath"] + "/envoy.yaml" == ec["args"][1],
      "docker/k8s/envoy-deployment.yaml: -c is not the mounted envoy.yaml")
cluster = envoy["static_resources"]["clusters"][0]
ep = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
check(ep["socket_address"] == {"address": "rankd-headless", "port_value": grpc},
      "docker/k8s/envoy.yaml: upstream is not rankd-headless:%d" % grpc)
check(cluster["health_checks"][0]["grpc_health_check"]["service_name"] == scorer,
      "docker/k8s/envoy.yaml: health check service")
front = k8s[("Service", "rankd")]["spec"]
check(front["selector"] == {"app": "envoy"} and front["ports"][0]["port"] == grpc,
      "docker/k8s/envoy-deployment.yaml: Service rankd must front Envoy on %d" % grpc)

for e in errors:
    print("check_deploy:", e, file=sys.stderr)
print(f"check_deploy: {'FAILED, %d problems' % len(errors) if errors else 'ok'}", file=sys.stderr)
sys.exit(1 if errors else 0)
