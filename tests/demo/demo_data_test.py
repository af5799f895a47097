#!/usr/bin/env python3
"""scripts/demo_data.py: the same seed gives the same bytes, held-out splits are disjoint from
training, grades are consistent, and tests/demo/cases.jsonl is what the generator makes."""
import hashlib
import json
import os
import subprocess
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import demo_data  # noqa: E402

# sha256 of `demo_data.py jsonl --split test --queries 30`. A change here changes the task the
# demo model was trained and measured on: retrain it, re-run scripts/eval_demo_model.py, and
# update this hash.
TEST_SPLIT_SHA256 = "b8fd36deb8bc6be856fb7f3b93dfd86d436b5eb7da25a0af4fc5ec346594e27b"


def generate(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "demo_data.py"), *args],
                          check=True, capture_output=True).stdout


class DemoDataTest(unittest.TestCase):
    def test_same_seed_same_bytes(self):
        a = generate("jsonl", "--split", "test", "--queries", "30")
        self.assertEqual(a, generate("jsonl", "--split", "test", "--queries", "30"))
        self.assertEqual(hashlib.sha256(a).hexdigest(), TEST_SPLIT_SHA256)

    def test_splits_are_disjoint(self):
        queries = {s: {ex["query"] for ex in demo_data.examples(s, n)}
                   for s, n in (("train", 1000), ("validation", 100), ("test", 200))}
        self.assertEqual(len(queries["test"]), 200)
        self.assertFalse(queries["train"] & queries["test"])
        self.assertFalse(queries["train"] & queries["validation"])
        self.assertFalse(queries["validation"] & queries["test"])
        for split, qs in queries.items():
            self.assertTrue(all(demo_data.split_of(q) == split for q in qs), split)

    def test_every_query_has_graded_candidates(self):
        for ex in demo_data.examples("validation", 200):
            self.assertEqual(len(ex["items"]), len(ex["grades"]))
            self.assertIn(3, ex["grades"], ex["query"])
            self.assertIn(0, ex["grades"], ex["query"])
            self.assertTrue(set(ex["grades"]) <= {0, 1, 2, 3})

    def test_metrics_of_a_perfect_and_a_reversed_ranking(self):
        grades = [[0, 3, 1, 2]]
        perfect = demo_data.ranking_metrics([[0, 3, 1, 2]], grades)
        self.assertEqual(perfect, {"mrr@10": 1.0, "ndcg@10": 1.0})
        worst = demo_data.ranking_metrics([[3, 0, 2, 1]], grades)
        self.assertEqual(worst["mrr@10"], 0.25)
        self.assertLess(worst["ndcg@10"], 0.6)

    def test_committed_cases_are_the_generators(self):
        with open(os.path.join(ROOT, "tests", "demo", "cases.jsonl")) as f:
            committed = [json.loads(line) for line in f]
        self.assertEqual(committed, demo_data.fixed_cases())


if __name__ == "__main__":
    unittest.main()
