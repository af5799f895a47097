#!/usr/bin/env python3
"""Compares the device code that two rankd builds hold for one GPU architecture.

  scripts/compare_cubins.py BUILD_A BUILD_B [--sm 90a]

For every kernels/*.cu object of rankd_cuda in BUILD_A, the cubin for the architecture (sm_90a
by default: what an H100/H200 runs) is taken from its fatbinary and compared, section by
section, with the same object's in BUILD_B: the kernels' machine code (.text.*), their resource
tables (.nv.info.*: registers, shared memory, barriers), constant banks, shared-memory and
relocation sections. Names are compared with the anonymous namespace's per-compile hash
(_GLOBAL__N__<8 hex>_) taken out; debug line tables and string tables are reported, not
compared (they hold paths and those hashes). Exit 0 when every kernel's code is byte-identical,
1 otherwise. Needs binutils' objcopy, nothing from CUDA.

Used for the CUDA image (docs/deploy.md): the H200 runs the image's sm_90a code, which equals
that of the sm_90a-only bundles that bench/RESULTS.md measured, so the image's arch list changes
nothing of their speed.
"""
import argparse
import glob
import os
import re
import struct
import subprocess
import sys
import tempfile

FATBIN_MAGIC = 0xBA55ED50
ENTRY_ELF = 2
ARCH_SPECIFIC = 0x100000  # fatbin entry flag of sm_XXa cubins
CODE_PREFIXES = ('.text.', '.nv.info.', '.nv.constant', '.nv.shared.', '.rela.text', '.nv.global')


def cubins(obj):
    """{(sm, flags): ELF bytes} of the cubins in a host object's .nv_fatbin section."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'fatbin')
        subprocess.run(['objcopy', '-O', 'binary', '--only-section=.nv_fatbin', obj, out],
                       check=True)
        data = open(out, 'rb').read()
    found, off = {}, 0
    while off + 16 <= len(data):
        magic, _, header_size, fat_size = struct.unpack_from('<IHHQ', data, off)
        if magic != FATBIN_MAGIC:
            off += 8  # fatbinaries are 8-byte aligned in the section
            continue
        p, end = off + header_size, off + header_size + fat_size
        while p < end:
            kind, _, entry_header, payload = struct.unpack_from('<HHIQ', data, p)
            sm = struct.unpack_from('<I', data, p + 28)[0]
            flags = struct.unpack_from('<Q', data, p + 40)[0]
            if kind == ENTRY_ELF:
                found[(sm, flags & ARCH_SPECIFIC)] = data[p + entry_header:p + entry_header + payload]
            p += entry_header + payload
        off = end
    return found


def sections(elf):
    """{name: bytes} of an ELF64 file's sections (empty for SHT_NOBITS)."""
    shoff = struct.unpack_from('<Q', elf, 0x28)[0]
    entsize, count, names = struct.unpack_from('<HHH', elf, 0x3A)
    headers = [struct.unpack_from('<IIQQQQIIQQ', elf, shoff + i * entsize) for i in range(count)]
    strtab = headers[names][4]
    result = {}
    for h in headers:
        start = strtab + h[0]
        name = elf[start:elf.index(b'\0', start)].decode()
        result[name] = b'' if h[1] == 8 else elf[h[4]:h[4] + h[5]]
    return result


def normalised(secs):
    return {re.sub(r'_GLOBAL__N__[0-9a-f]{8}_', '_GLOBAL__N__', k): v for k, v in secs.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('build_a')
    ap.add_argument('build_b')
    ap.add_argument('--sm', default='90a', help='architecture, e.g. 90a, 80 (default 90a)')
    args = ap.parse_args()
    key = (int(args.sm.rstrip('a')), ARCH_SPECIFIC if args.sm.endswith('a') else 0)
    rel = 'src/backend/cuda/CMakeFiles/rankd_cuda.dir/__/__/__/kernels'
    objects = sorted(glob.glob(os.path.join(args.build_a, rel, '*.cu.o')))
    if not objects:
        sys.exit(f'compare_cubins: no kernels/*.cu objects under {args.build_a}/{rel}')
    kernels = code_bytes = 0
    failed = False
    for a in objects:
        name = os.path.basename(a)
        b = os.path.join(args.build_b, rel, name)
        ca, cb = cubins(a), cubins(b) if os.path.exists(b) else {}
        if key not in ca or key not in cb:
            print(f'{name}: no sm_{args.sm} cubin in {"A" if key not in ca else "B"}')
            failed = True
            continue
        sa, sb = normalised(sections(ca[key])), normalised(sections(cb[key]))
        code_a = {n for n in sa if n.startswith(CODE_PREFIXES)}
        code_b = {n for n in sb if n.startswith(CODE_PREFIXES)}
        differ = sorted(n for n in code_a & code_b if sa[n] != sb[n])
        only = sorted(code_a ^ code_b)
        texts = [n for n in code_a if n.startswith('.text.')]
        kernels += len(texts)
        code_bytes += sum(len(sa[n]) for n in texts)
        other = sorted(n for n in set(sa) | set(sb)
                       if not n.startswith(CODE_PREFIXES) and sa.get(n) != sb.get(n))
        verdict = 'identical' if not differ and not only else 'DIFFERENT'
        print(f'{name}: {len(texts)} kernels, code {verdict}'
              + (f'; differing {differ + only}' if differ or only else '')
              + (f' (not compared: {", ".join(other)})' if other else ''))
        failed |= bool(differ or only)
    print(f'sm_{args.sm}: {kernels} kernels, {code_bytes:,} bytes of machine code, '
          + ('DIFFERENT' if failed else 'byte-identical'))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
