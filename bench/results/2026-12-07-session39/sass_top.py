import csv, gzip, sys
for name in sys.argv[1:]:
    rows = list(csv.reader(gzip.open(name, 'rt')))
    hdr = rows[1]
    data = rows[2:]
    i_s = hdr.index("Warp Stall Sampling (All Samples)")
    i_src = hdr.index("Source")
    stall_cols = [i for i,h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(int(r[i_s] or 0) for r in data)
    print("==", name, "samples", total, "instructions", len(data))
    # per stall reason totals
    tot = {hdr[i]: sum(int(r[i] or 0) for r in data) for i in stall_cols}
    print("  reasons:", ", ".join("%s %.1f%%" % (k[6:], 100*v/total) for k,v in sorted(tot.items(), key=lambda x:-x[1])[:8]))
    top = sorted(range(len(data)), key=lambda j: -int(data[j][i_s] or 0))[:25]
    for j in top:
        r = data[j]
        reasons = sorted(((int(r[i] or 0), hdr[i][6:]) for i in stall_cols), reverse=True)[:2]
        print("  %5d %5.1f%%  #%-5d %-60s %s" % (int(r[i_s]), 100*int(r[i_s])/total, j, r[i_src].strip()[:60], reasons))
