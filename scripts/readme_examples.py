#!/usr/bin/python3
"""Runs README.md's examples against the embedded default and checks (or rewrites) their outputs.

An example in README.md is a fenced `sh` block of one command (backslash-continued lines are one
command) right after a line `<!-- example -->`, followed by a fenced block of what that command
prints:

    <!-- example -->
    ```sh
    curl -s 127.0.0.1:8080/rerank -H 'Content-Type: application/json' -d '{...}'
    ```
    ```json
    [{"index":1,"score":0.93}]
    ```

The commands run in README order, from the repository root, with bash, against one fresh
`rankd serve` on the embedded default (configs/tiny-cpu.yaml, exactly as scripts/run.sh starts it,
but on free ports) and its binaries. To point a command at that server, and only for that:
  - the default addresses 127.0.0.1:50051 (gRPC), 127.0.0.1:8080 (HTTP API) and
    127.0.0.1:9464 (metrics) become the server's;
  - `build/bin/` becomes the directory of --rankd (the build under test);
  - `rankd-client SUBCOMMAND` gets `--target ADDRESS` (its default is 127.0.0.1:50051), and
    `examples/python/rerank_http.py` gets `--url http://ADDRESS` (its default is
    http://127.0.0.1:8080).
What a command prints is compared with the README's block after normalizing both:
  - the values of "queue_seconds" and "compute_seconds" (the time a call waited and took,
    different on every run) become 0;
  - numbers with a fraction or an exponent compare within a relative 1e-5 (scores are float32,
    printed to 6 significant digits; a CPU with other vector units may differ in the last digit,
    and rounding to 6 digits alone would turn 1.553425e-05 and 1.553426e-05 into two numbers);
  - everything else compares exactly (ids, order, texts, token ids, counts).

  scripts/readme_examples.py --rankd build/bin/rankd            # check: exit 1 on any difference
  scripts/readme_examples.py --rankd build/bin/rankd --update   # rewrite the README's outputs

After the demo model changes, --update regenerates every printed output from the live server (the
prose around them is the author's to re-read).
"""
import argparse
import difflib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "<!-- example -->"
FENCE = re.compile(r"^```(\S*)\s*$")
TIMING_KEYS = ("queue_seconds", "compute_seconds")
DIGITS = 6
REL_TOLERANCE = 1e-5
FLOAT = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+e[-+]?\d+")


def parse_examples(lines):
    """[(command_text, output_start, output_end)]: the output block's lines [start, end)."""
    examples = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != MARKER:
            i += 1
            continue
        j = i + 1
        if j >= len(lines) or FENCE.match(lines[j]) is None or FENCE.match(lines[j]).group(1) != "sh":
            sys.exit("README.md:%d: %s must be followed by a ```sh block" % (i + 1, MARKER))
        k = j + 1
        while k < len(lines) and not lines[k].startswith("```"):
            k += 1
        command = "\n".join(lines[j + 1:k])
        o = k + 1
        if o >= len(lines) or FENCE.match(lines[o]) is None:
            sys.exit("README.md:%d: the command's block must be followed by its output's block" % (k + 1))
        e = o + 1
        while e < len(lines) and not lines[e].startswith("```"):
            e += 1
        if e >= len(lines):
            sys.exit("README.md:%d: output block not closed" % (o + 1))
        examples.append((command, o + 1, e))
        i = e + 1
    return examples


def start_server(rankd, workdir):
    ready = os.path.join(workdir, "ready.json")
    log = open(os.path.join(workdir, "server.log"), "wb")
    proc = subprocess.Popen(
        [rankd, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
         "--http-listen", "127.0.0.1:0", "--ready-file", ready],
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 120
    ports = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("rankd serve exited:\n" + open(log.name).read())
        if os.path.exists(ready):
            try:
                ports = json.load(open(ready))
                break
            except ValueError:
                pass  # being written
        time.sleep(0.1)
    if ports is None:
        proc.kill()
        raise RuntimeError("rankd serve did not start:\n" + open(log.name).read())
    readyz = "http://127.0.0.1:%d/readyz" % ports["metrics_port"]
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(readyz, timeout=2).status == 200:
                return proc, ports, log.name
        except OSError:
            pass  # 503 until the workers are up
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("rankd serve not ready:\n" + open(log.name).read())


def localize(command, ports, bindir):
    """The command, pointed at the test's server (the rules of the docstring)."""
    grpc = "127.0.0.1:%d" % ports["grpc_port"]
    http = "127.0.0.1:%d" % ports["http_port"]
    command = command.replace("127.0.0.1:50051", grpc)
    command = command.replace("127.0.0.1:8080", http)
    command = command.replace("127.0.0.1:9464", "127.0.0.1:%d" % ports["metrics_port"])
    command = re.sub(r"(^|[\s;|&(])build/bin/", lambda m: m.group(1) + bindir + "/", command)
    command = re.sub(r"(rankd-client\s+\w+)", r"\1 --target " + grpc, command)
    command = re.sub(r"(examples/python/rerank_http\.py)", r"\1 --url http://" + http, command)
    return command


def normalize_json(value):
    if isinstance(value, dict):
        return {k: (0 if k in TIMING_KEYS else normalize_json(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize_json(v) for v in value]
    if isinstance(value, float):
        return float("%.*g" % (DIGITS, value))
    return value


def normalize(text):
    """Each line: JSON (normalized), else the line as it is."""
    out = []
    for line in text.rstrip("\n").split("\n"):
        try:
            value = json.loads(line)
        except ValueError:
            # A Python repr line: its floats to the same digits.
            out.append(re.sub(r"-?\d+\.\d+(e[-+]?\d+)?",
                              lambda m: "%.*g" % (DIGITS, float(m.group(0))), line))
            continue
        out.append(json.dumps(normalize_json(value), sort_keys=False, ensure_ascii=False))
    return out


def same_lines(want, got):
    """Normalized lines equal but for their floats, which agree within REL_TOLERANCE."""
    if len(want) != len(got):
        return False
    for w, g in zip(want, got):
        if FLOAT.sub("#", w) != FLOAT.sub("#", g):
            return False
        for a, b in zip(FLOAT.findall(w), FLOAT.findall(g)):
            a, b = float(a), float(b)
            if abs(a - b) > REL_TOLERANCE * max(abs(a), abs(b)):
                return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rankd", default=os.path.join(ROOT, "build", "bin", "rankd"))
    ap.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    ap.add_argument("--update", action="store_true", help="rewrite the README's outputs")
    a = ap.parse_args()
    rankd = os.path.abspath(a.rankd)
    bindir = os.path.dirname(rankd)
    lines = open(a.readme, encoding="utf-8").read().split("\n")
    examples = parse_examples(lines)
    if not examples:
        sys.exit("%s: no %s blocks" % (a.readme, MARKER))
    workdir = tempfile.mkdtemp(prefix="rankd-readme-")
    proc, ports, log = start_server(rankd, workdir)
    failures = []
    outputs = []
    try:
        for command, start, end in examples:
            run = subprocess.run(["bash", "-c", localize(command, ports, bindir)], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
            printed = run.stdout.decode("utf-8", "replace")
            if run.returncode != 0:
                failures.append("%s\n  exited %d: %s" % (command, run.returncode,
                                                        run.stderr.decode("utf-8", "replace")))
                outputs.append(None)
                continue
            outputs.append(printed.rstrip("\n").split("\n"))
            want = normalize("\n".join(lines[start:end]))
            got = normalize(printed)
            if not same_lines(want, got):
                diff = "\n".join(difflib.unified_diff(want, got, "README.md", "printed", lineterm=""))
                failures.append("README.md:%d: %s\n%s" % (start, command.split("\n")[0], diff))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if failures and not a.update or any(o is None for o in outputs):
            sys.stderr.write("the server's log:\n" + open(log).read())
        shutil.rmtree(workdir, ignore_errors=True)
    if a.update:
        if any(o is None for o in outputs):
            sys.exit("not updated: a command failed:\n" + "\n".join(failures))
        for (command, start, end), printed in reversed(list(zip(examples, outputs))):
            lines[start:end] = printed
        open(a.readme, "w", encoding="utf-8").write("\n".join(lines))
        print("%s: %d outputs written" % (a.readme, len(examples)))
        return
    if failures:
        sys.stderr.write("\n\n".join(failures) + "\n")
        sys.exit("%d of %d README examples differ from what the embedded default prints "
                 "(scripts/readme_examples.py --update rewrites them)" % (len(failures), len(examples)))
    print("%d README examples print what README.md says" % len(examples))


if __name__ == "__main__":
    main()
