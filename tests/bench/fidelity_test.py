#!/usr/bin/env python3
"""bench/fidelity.py: its rank statistics (ties, repeated items, top-1), and a run against rankd's
CPU backend (the float32 reference), which must reproduce every golden model's ranking.

    fidelity_test.py PATH/TO/rankd
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import fidelity  # noqa: E402

RANKD = None


def req(*items):
    return ([1], [list(i) for i in items], None)


class StatsTest(unittest.TestCase):
    def test_ranks_share_ties(self):
        self.assertEqual(fidelity.ranks([3.0, 1.0, 3.0, 2.0]), [3.5, 1.0, 3.5, 2.0])

    def test_spearman(self):
        self.assertAlmostEqual(fidelity.spearman([1, 2, 3], [10, 20, 30]), 1.0)
        self.assertAlmostEqual(fidelity.spearman([1, 2, 3], [3, 2, 1]), -1.0)
        self.assertAlmostEqual(fidelity.spearman([1, 2, 3, 4], [1, 2, 4, 3]), 0.8)

    def test_compare_counts_repeated_items_once_and_checks_top1(self):
        reqs = [req([5], [6], [5]), req([7], [8])]
        # Item 2 repeats item 0: the peer's rounding puts it above item 0, which is no swap.
        m = fidelity.compare(reqs, [[1.0, 0.5, 1.0], [0.0, 1.0]], [[1.0, 0.5, 1.0 + 1e-6], [1.0, 0.0]])
        self.assertEqual(m["ranked_requests"], 2)
        self.assertAlmostEqual(m["spearman"], 0.0)  # (1 + -1) / 2
        self.assertAlmostEqual(m["top1"], 0.5)
        self.assertAlmostEqual(m["rms_err"], (2.0 / 5) ** 0.5, places=5)

    def test_single_item_requests_are_not_ranked(self):
        m = fidelity.compare([req([5])], [[1.0]], [[2.0]])
        self.assertEqual(m["ranked_requests"], 0)
        self.assertAlmostEqual(m["rms_err"], 1.0)


class CpuRunTest(unittest.TestCase):
    def test_cpu_backend_reproduces_the_golden_rankings(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "fidelity.json")
            subprocess.run([sys.executable, os.path.join(ROOT, "bench", "fidelity.py"), "--rankd",
                            RANKD, "--backend", "cpu", "--demo-queries", "20", "--json", out],
                           check=True, capture_output=True)
            result = json.load(open(out))
        golden = [r for r in result["models"] if r.get("reference", "").startswith("golden")]
        self.assertGreaterEqual(len(golden), 10)
        for r in golden:
            m = r["peers"]["rankd-cpu-fp32"]
            self.assertGreater(m["ranked_requests"], 0, r["model"])
            self.assertGreater(m["spearman"], 0.9999, r["model"])
            self.assertEqual(m["top1"], 1.0, r["model"])
            self.assertLess(m["rms_err"], 1e-3, r["model"])
        self.assertTrue(result["summary"]["rankd-cpu-fp32"]["meets_bars"])


if __name__ == "__main__":
    RANKD = os.path.abspath(sys.argv.pop(1))
    unittest.main()
