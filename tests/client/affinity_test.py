#!/usr/bin/env python3
"""examples/python/rankd_affinity.py pins the x-rankd-affinity values that affinity_test.cc pins
for rankd-client and rankd-bench (the same queries, the same digits)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "python"))
from rankd_affinity import HEADER, affinity_key  # noqa: E402


class AffinityTest(unittest.TestCase):
    def test_values(self):
        self.assertEqual(HEADER, "x-rankd-affinity")
        self.assertEqual(affinity_key("senior python engineer in berlin"), "b24e1fb9182dd497")
        self.assertEqual(affinity_key(""), "e3b0c44298fc1c14")
        self.assertEqual(affinity_key("caf\u00e9"), "850f7dc43910ff89")
        self.assertEqual(affinity_key(query_ids=[1, 15043, 3186]), "ec06b0e2d2742447")


if __name__ == "__main__":
    unittest.main()
