#!/usr/bin/env python3
"""Summarises `ncu --page source --csv --print-source sass` output: executed warp instructions by
opcode and the hottest instructions (by executed count and by stall samples).

  ncu_sass_hot.py SOURCE.csv [TOP]
"""
import collections
import csv
import sys


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    rows = list(csv.reader(open(path, newline="", errors="replace")))
    # The header is the first row that names a "Source" column.
    h = next(i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r))
    head = [c.strip() for c in rows[h]]
    print("columns:", head)
    src = head.index("Source")

    def col(*names):
        for n in names:
            for i, c in enumerate(head):
                if c.lower() == n.lower():
                    return i
        for n in names:
            for i, c in enumerate(head):
                if n.lower() in c.lower():
                    return i
        return None

    ex = col("Instructions Executed", "Warp Instructions Executed")
    st = col("Warp Stall Sampling (All Samples)", "Sampling Data (All)")
    def num(r, i):
        try:
            return float(r[i].replace(",", "")) if i is not None and i < len(r) else 0.0
        except ValueError:
            return 0.0
    body = [r for r in rows[h + 1:] if len(r) > src and r[src].strip()]
    by_op = collections.Counter()
    stall_op = collections.Counter()
    total = total_st = 0.0
    for r in body:
        text = r[src].strip()
        parts = text.split()
        op = parts[0]
        if op.startswith("@"):
            op = parts[1] if len(parts) > 1 else op
        op = op.split(".")[0]
        e, s = num(r, ex), num(r, st)
        by_op[op] += e
        stall_op[op] += s
        total += e
        total_st += s
    print(f"executed warp instructions {total:.0f}, stall samples {total_st:.0f}")
    print("by opcode: executed (share)  stall samples (share)")
    for op, e in by_op.most_common(top):
        print(f"  {op:10s} {e:12.0f} {e / max(total, 1):6.1%}  {stall_op[op]:10.0f} "
              f"{stall_op[op] / max(total_st, 1):6.1%}")
    print("hottest instructions by stall samples:")
    for r in sorted(body, key=lambda r: -num(r, st))[:top]:
        print(f"  {num(r, st):8.0f} {num(r, ex):10.0f}  {r[src].strip()[:100]}")


if __name__ == "__main__":
    main()
