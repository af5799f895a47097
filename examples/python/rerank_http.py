#!/usr/bin/python3
"""Reranks documents with a running `rankd serve` over HTTP (POST /v1/rerank), standard library only.

The call a RAG tool makes (LangChain's and LlamaIndex's Cohere-style rerankers send this shape).
No "model" is sent: the server scores with the model it serves and names it in the answer (any
name is accepted unless server.strict_model_name is on).

  build/bin/rankd serve &                 # the embedded default: the demo reranker
  examples/python/rerank_http.py          # prints the best document's result
  examples/python/rerank_http.py --url http://127.0.0.1:8080 --api-key KEY \\
      --query "rust engineer in berlin" --document "Barista, Lisbon" --document "Rust developer, Berlin"
"""
import argparse
import json
import sys
import urllib.error
import urllib.request


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080", help="server.http_listen")
    ap.add_argument("--api-key", default="", help="only with server.auth.api_keys_file")
    ap.add_argument("--query", default="rust engineer in berlin")
    ap.add_argument("--document", action="append",
                    help="repeatable (default: two example postings)")
    a = ap.parse_args()
    body = {"query": a.query,
            "documents": a.document or ["Barista, Lisbon", "Rust developer, Berlin"],
            "top_n": 1}
    headers = {"Content-Type": "application/json"}
    if a.api_key:
        headers["Authorization"] = "Bearer " + a.api_key
    request = urllib.request.Request(a.url + "/v1/rerank", data=json.dumps(body).encode(),
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            answer = json.load(r)
    except urllib.error.HTTPError as e:  # errors: {"error": {"message", "code"}}
        sys.exit("HTTP %d: %s" % (e.code, json.load(e)["error"]["message"]))
    best = answer["results"][0]  # sorted best first
    print(json.dumps({"model": answer["model"], "best": best}))


if __name__ == "__main__":
    main()
