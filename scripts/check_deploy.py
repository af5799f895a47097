#!/usr/bin/env python3
"""Checks that the deployment files agree with each other and with the server's defaults.

Ports, paths, probe targets, grace periods, environment variables and the CUDA architectures of
docker/Dockerfile.*, docker/rankd.yaml, docker/compose.yaml, docker/k8s/*.yaml and docs/deploy.md
against include/rankd/server/config/config.h and src/server; and the fleet's routing policy (affinity
header, bounded load, fallback, retries, health checks) of docker/haproxy.cfg against
docker/k8s/envoy.yaml and the clients. Prints every disagreement; exit 1 if any.
Needs python3 and its yaml module (Debian's python3-yaml, which yamllint brings).
"""
import pathlib
import re
import struct
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
header = read("include/rankd/server/config/config.h")


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
host_ports = [re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", p).split(":")[0]  # ${VAR:-DEFAULT}: DEFAULT
              for s in compose["services"].values() for p in s.get("ports", [])]
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

# The fleet: compose's profile `fleet` (HAProxy) and Kubernetes' Envoy route by one policy.
AFFINITY = re.search(r'kAffinityHeader\[\] = "([^"]+)"', read("src/client/affinity.h")).group(1)
check(f'HEADER = "{AFFINITY}"' in read("examples/python/rankd_affinity.py"),
      f"examples/python/rankd_affinity.py: HEADER is not {AFFINITY}")
HEALTH_PATH = "/grpc.health.v1.Health/Check"


def grpc_health_check_bytes(service):
    """One grpc.health.v1.Health/Check call of `service` over cleartext HTTP/2, as a client with
    prior knowledge sends it: the preface with an empty SETTINGS frame, HEADERS, DATA."""
    def frame(kind, flags, stream, payload):
        return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
            struct.pack(">I", stream) + payload

    def literal(index, value):  # HPACK: literal without indexing, indexed name, no Huffman
        prefix = bytes([index]) if index < 15 else bytes([15, index - 15])
        return prefix + bytes([len(value)]) + value.encode()

    headers = (bytes([0x83, 0x86]) +  # :method POST, :scheme http (static table 3, 6)
               literal(4, HEALTH_PATH) + literal(1, "rankd") +  # :path, :authority
               literal(31, "application/grpc") +  # content-type
               bytes([0, 2]) + b"te" + bytes([8]) + b"trailers")
    message = bytes([0x0a, len(service)]) + service.encode()  # HealthCheckRequest.service
    return [b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""),
            frame(1, 4, 1, headers),  # END_HEADERS
            frame(0, 1, 1, b"\x00" + struct.pack(">I", len(message)) + message)]  # END_STREAM


# HAProxy: sections of docker/haproxy.cfg, each a list of its lines' words (comments dropped).
haproxy = {}
section = None
for line in read("docker/haproxy.cfg").splitlines():
    words = line.split("#", 1)[0].split()
    if not words:
        continue
    if not line[0].isspace():
        section = " ".join(words)
        haproxy[section] = []
    else:
        haproxy[section].append(words)


def directive(section_name, *prefix):
    """The words after `prefix` of each line of a section that starts with it."""
    return [w[len(prefix):] for w in haproxy.get(section_name, []) if w[:len(prefix)] == list(prefix)]


def one(values, where):
    check(len(values) == 1, f"docker/haproxy.cfg {where}: expected once, found {len(values)}")
    return values[0] if values else []


def duration_s(text):
    m = re.fullmatch(r"(\d+)(ms|s|m)?", text)
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, None: 0.001}[m.group(2)]


where = "docker/haproxy.cfg"
default_server = one(directive("defaults", "default-server"), "default-server")
server_opts = dict(zip(default_server[::2], default_server[1::2]))
serving = (b"\x00" + struct.pack(">I", 2) + bytes([0x08, 1])).hex()  # {status: SERVING}
check([w[0] for w in directive("backend grpc-affinity", "tcp-check", "send-binary")] ==
      [b.hex() for b in grpc_health_check_bytes(scorer)],
      f"{where}: the tcp-check bytes are not a {HEALTH_PATH} call of {scorer} "
      "(grpc_health_check_bytes in scripts/check_deploy.py builds them)")
check(directive("backend grpc-affinity", "tcp-check", "expect")[-1:] ==
      [["min-recv", "1", "binary", serving]],
      f"{where}: the health check does not end expecting SERVING ({serving})")
# What each pair of backends (gRPC, HTTP API) says; each must say one thing.
headers, factors, fallbacks = set(), set(), set()
servers = {}  # backend -> [(name, host, port)]
for kind, rankd_port in (("grpc", grpc), ("http", api)):
    frontend, affinity, fallback = f"frontend {kind}", f"backend {kind}-affinity", f"backend {kind}"
    use = one(directive(frontend, "use_backend"), f"{frontend} use_backend")
    m = re.fullmatch(r"if \{ req\.hdr\(([^)]+)\) -m found \}", " ".join(use[1:]))
    check(use[:1] == [f"{kind}-affinity"] and m, f"{where} {frontend}: use_backend {use}")
    headers.add(m and m.group(1))
    check(directive(frontend, "default_backend") == [[kind]],
          f"{where} {frontend}: default_backend is not {kind}")
    m = re.fullmatch(r"hdr\(([^)]+)\)", " ".join(one(directive(affinity, "balance"), affinity)))
    headers.add(m and m.group(1))
    check(directive(affinity, "hash-type") == [["consistent"]], f"{where} {affinity}: hash-type")
    factors.add(" ".join(one(directive(affinity, "hash-balance-factor"), affinity)))
    fallbacks.add(" ".join(one(directive(fallback, "balance"), fallback)))
    for backend in (affinity, fallback):
        servers[backend] = [(w[0], *w[1].rsplit(":", 1)) for w in directive(backend, "server")]
        check(all(int(p) == rankd_port for _, _, p in servers[backend]),
              f"{where} {backend}: servers not on rankd's port {rankd_port}")
check(len(headers) == len(factors) == len(fallbacks) == 1,
      f"{where}: the backends differ: headers {headers}, hash-balance-factor {factors}, "
      f"fallback {fallbacks}")
hap_fleet = [(n, h) for n, h, _ in servers["backend grpc-affinity"]]
check(all([(n, h) for n, h, _ in v] == hap_fleet for v in servers.values()),
      f"{where}: the backends list different servers")
check(all("check" in w for w in directive("backend grpc-affinity", "server")) and
      all(w[-2:] == ["track", f"grpc-affinity/{w[0]}"]
          for b in servers if b != "backend grpc-affinity" for w in directive(b, "server")),
      f"{where}: grpc-affinity checks its servers, the other backends track them")
hap = {
    "header": min(headers, key=str),
    "hash_balance_factor": int(min(factors)),
    "fallback": min(fallbacks),
    "retries": int(one(directive("defaults", "retries"), "retries")[0]),
    "retry_on": set(one(directive("defaults", "retry-on"), "retry-on")),
    "retry_elsewhere": directive("defaults", "option", "redispatch") == [["1"]],
    "health": (scorer, duration_s(server_opts["inter"]),
               duration_s(one(directive("defaults", "timeout", "check"), "timeout check")[0]),
               int(server_opts["fall"]), int(server_opts["rise"])),
}

# Envoy: the affinity route and cluster, the fallback route and cluster, retries, health checks.
where = "docker/k8s/envoy.yaml"
routes = envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0][
    "typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
clusters = {c["name"]: c for c in envoy["static_resources"]["clusters"]}
check(len(routes) == 2, f"{where}: routes are not [affinity, fallback]")
aff_route, fb_route = routes[0], routes[-1]
match_headers = aff_route["match"].get("headers", [])
hash_headers = [h["header"]["header_name"] for h in aff_route["route"].get("hash_policy", [])]
check(len(match_headers) == 1 and match_headers[0].get("present_match") is True,
      f"{where}: the affinity route does not match on the header's presence")
check("headers" not in fb_route["match"] and "hash_policy" not in fb_route["route"],
      f"{where}: the fallback route must take every other call")
aff_cluster = clusters[aff_route["route"]["cluster"]]
fb_cluster = clusters[fb_route["route"]["cluster"]]
retry = aff_route["route"]["retry_policy"]
check(fb_route["route"]["retry_policy"] == retry, f"{where}: the routes retry differently")
hc = aff_cluster["health_checks"][0]
check(fb_cluster["health_checks"] == aff_cluster["health_checks"] and
      fb_cluster["load_assignment"]["endpoints"] == aff_cluster["load_assignment"]["endpoints"],
      f"{where}: the two clusters differ in health checks or endpoints")
check(aff_cluster["lb_policy"] == "RING_HASH", f"{where}: the affinity cluster is not RING_HASH")
envoy_policy = {
    "header": {h["name"] for h in match_headers} | set(hash_headers),
    "hash_balance_factor": aff_cluster.get("common_lb_config", {}).get(
        "consistent_hashing_lb_config", {}).get("hash_balance_factor"),
    "fallback": fb_cluster["lb_policy"],
    "retries": retry["num_retries"],
    "retry_on": set(retry["retry_on"].split(",")),
    "retry_elsewhere": [p["name"] for p in retry.get("retry_host_predicate", [])] ==
    ["envoy.retry_host_predicates.previous_hosts"],
    "health": (hc["grpc_health_check"]["service_name"], seconds(hc["interval"]),
               seconds(hc["timeout"]), hc["unhealthy_threshold"], hc["healthy_threshold"]),
}
envoy_policy["header"] = next(iter(envoy_policy["header"])) \
    if len(envoy_policy["header"]) == 1 else envoy_policy["header"]
# The same policy in each one's words. HAProxy sees a gRPC UNAVAILABLE only on the HTTP API (503):
# gRPC's comes in the trailers of an HTTP 200 (hence server.drain_delay_s in the fleet).
as_envoy = {"fallback": {"leastconn": "LEAST_REQUEST"},
            "retry_on": {"conn-failure": "connect-failure", "empty-response": "reset",
                         "503": "unavailable"}}
translated = dict(hap)
translated["fallback"] = as_envoy["fallback"].get(hap["fallback"], hap["fallback"])
translated["retry_on"] = {as_envoy["retry_on"].get(c, c) for c in hap["retry_on"]}
for key in envoy_policy:
    check(translated[key] == envoy_policy[key],
          f"docker/haproxy.cfg and {where} disagree on {key}: {translated[key]} vs "
          f"{envoy_policy[key]}")
check(envoy_policy["header"] == AFFINITY,
      f"the balancers hash on {envoy_policy['header']}, the clients send {AFFINITY}")

# How long each balancer takes to see a pod stop: a stop must keep serving longer than that
# (compose: server.drain_delay_s; Kubernetes: the preStop sleep, before SIGTERM).
_, interval_s, timeout_s, fall, _ = envoy_policy["health"]
detect_s = (interval_s + timeout_s) * fall  # each check starts an interval after the last ended
check(int(pre_stop[1]) >= detect_s,
      f"docker/k8s/rankd.yaml: preStop {pre_stop[1]} s < Envoy's detection {detect_s} s")
fleet_nodes = {name: svc for name, svc in compose["services"].items()
               if svc.get("profiles") == ["fleet"] and svc.get("image") == "rankd:cpu"}
check(sorted(fleet_nodes) == sorted(h for _, h in hap_fleet),
      f"docker/compose.yaml: fleet nodes {sorted(fleet_nodes)} vs HAProxy's servers {hap_fleet}")
for name, svc in fleet_nodes.items():
    flags = dict(zip(svc.get("command", [])[::2], svc.get("command", [])[1::2]))
    delay = float(flags.get("--drain-delay-s", 0))
    check(delay >= detect_s, f"docker/compose.yaml {name}: --drain-delay-s {delay} < HAProxy's "
          f"detection {detect_s} s ((check interval + timeout) x fall)")
    check(seconds(svc["stop_grace_period"]) >= delay + stop_s,
          f"docker/compose.yaml {name}: stop_grace_period < drain delay + {stop_s} s")
    health_command(svc["healthcheck"]["test"][1:], f"docker/compose.yaml {name}")
balancer = compose["services"]["rankd-balancer"]
hap_image = read("docker/Dockerfile.haproxy")
cfg_path = re.search(r'"-f", "([^"]+)"', hap_image).group(1)
check(balancer["build"]["dockerfile"] == "docker/Dockerfile.haproxy" and
      f"./haproxy.cfg:{cfg_path}:ro" in balancer["volumes"],
      f"docker/compose.yaml rankd-balancer: not Dockerfile.haproxy with haproxy.cfg at {cfg_path}")
binds = {int(w[0].lstrip(":")) for f in ("frontend grpc", "frontend http", "frontend stats")
         for w in directive(f, "bind")}
targets = {int(p.rsplit(":", 1)[1]) for p in balancer["ports"]}
expose = {int(p) for line in re.findall(r"^EXPOSE (.*)$", hap_image, re.M) for p in line.split()}
check(binds == targets == expose, f"docker/compose.yaml rankd-balancer: ports {sorted(targets)}, "
      f"HAProxy binds {sorted(binds)}, Dockerfile.haproxy EXPOSE {sorted(expose)}")

for e in errors:
    print("check_deploy:", e, file=sys.stderr)
print(f"check_deploy: {'FAILED, %d problems' % len(errors) if errors else 'ok'}", file=sys.stderr)
sys.exit(1 if errors else 0)
