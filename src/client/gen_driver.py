#!/usr/bin/env python3
"""Build-time generator for Flyt's drop-in libcuda.so.1 (standard library only).

Inputs: libcuda.exports (every symbol NVIDIA's CUDA 13.0 driver stub exports,
one per line) and the driver typedef headers (cudaTypedefs.h and
cudaProfilerTypedefs.h), which declare one PFN_<name>_v<version>[_ptds|_ptsz]
typedef for every ABI of every driver function.

Outputs, in --outdir:
  libcuda.map           linker version script: exactly the exports, the rest
                        local. NVIDIA's library has no symbol versions, so the
                        script has one anonymous version node, which adds none.
  flyt_driver_stubs.inc a weak `CUresult NAME(void)` for every export that
                        returns flyt_driver_unsupported("NAME"). It must be
                        compiled in a translation unit of its own WITHOUT
                        cuda.h (a C file holding only the #include will do):
                        it declares its own CUresult and the (void) stubs
                        would clash with cuda.h's prototypes and macros.
  flyt_procs.inc        the cuGetProcAddress table for procs.c, sorted by
                        name, then version, then legacy before per-thread.

Matching rule (checked against the exports; any miss stops the build):
  * the legacy typedefs of a name, in increasing version, are its 1st, 2nd,
    3rd... ABI, implemented by NAME, NAME_v2, NAME_v3...;
  * a _ptds/_ptsz typedef of version V is the per-thread variant of the
    newest legacy ABI with version <= V: its symbol is that ABI's symbol plus
    _ptds/_ptsz (cuMemcpyHtoD_v7000_ptds -> cuMemcpyHtoD_v2_ptds).
Typedefs inside #if blocks (the older ABIs under __CUDA_API_VERSION_INTERNAL)
count too: they are what NAME (v1) implements.
"""

import argparse
import os
import re
import sys

# Exceptions to the rule: (name, version, variant) -> exported symbol, where
# variant is "", "ptds" or "ptsz". None are needed for CUDA 13.0: every
# typedef of cudaTypedefs.h and cudaProfilerTypedefs.h follows the rule.
# Each entry added here needs a comment saying why.
OVERRIDES = {}

# Table entries with no typedef at all: (name, version, variant) -> symbol.
# None are needed for CUDA 13.0. Each entry added here needs a comment.
EXTRA_ENTRIES = {}

TYPEDEF_RE = re.compile(r"\(\s*CUDAAPI\s*\*\s*PFN_([A-Za-z0-9_]+)\s*\)")
PFN_RE = re.compile(r"^(\w+)_v([0-9]+)(?:_(ptds|ptsz))?$")
SYMBOL_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
VARIANTS = ("", "ptds", "ptsz")


class GenError(Exception):
    """A fact the rule cannot place: the build must stop, not guess."""


def read_exports(path):
    names = []
    with open(path, encoding="ascii") as f:
        for lineno, line in enumerate(f, 1):
            name = line.strip()
            if not name:
                continue
            if not SYMBOL_RE.match(name):
                raise GenError(f"{path}:{lineno}: not a symbol name: {name!r}")
            names.append(name)
    if names != sorted(set(names)):
        raise GenError(f"{path}: must be sorted (C locale) without duplicates")
    return names


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def read_typedefs(path):
    """Every PFN_ typedef name in a header, whatever #if it sits in."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip_comments(f.read())
    found = []
    for line in text.splitlines():
        if line.lstrip().startswith("#") and "PFN_" in line:
            raise GenError(f"{path}: a macro mentions PFN_, which this "
                           f"generator does not understand: {line.strip()}")
    for stmt in text.split(";"):
        if "PFN_" not in stmt:
            continue
        names = TYPEDEF_RE.findall(stmt)
        if "typedef" not in stmt or len(names) != 1:
            raise GenError(f"{path}: cannot parse: {' '.join(stmt.split())}")
        found.append(names[0])
    if not found:
        raise GenError(f"{path}: no PFN_ typedefs found")
    return found


def parse_pfn(pfn):
    """PFN suffix -> (name, version, variant), or raise if ambiguous."""
    m = PFN_RE.match(pfn)
    if not m:
        raise GenError(f"PFN_{pfn}: no _v<version> suffix")
    name, version, variant = m.group(1), int(m.group(2)), m.group(3) or ""
    if re.search(r"_v[0-9]+$", name) or name.endswith(("_ptds", "_ptsz")):
        raise GenError(f"PFN_{pfn}: base name {name} itself looks versioned")
    if version < 1000:
        raise GenError(f"PFN_{pfn}: {version} is not a CUDA version")
    return name, version, variant


def group_abis(pfns):
    """name -> {variant: sorted versions}; duplicates are errors."""
    abis = {}
    for pfn in pfns:
        name, version, variant = parse_pfn(pfn)
        per = abis.setdefault(name, {v: [] for v in VARIANTS})
        if version in per[variant]:
            raise GenError(f"PFN_{pfn} declared twice")
        per[variant].append(version)
    for name, per in abis.items():
        for versions in per.values():
            versions.sort()
        if per["ptds"] and per["ptsz"]:
            raise GenError(f"{name} has both _ptds and _ptsz typedefs")
        if not per[""]:
            raise GenError(f"{name} has per-thread typedefs but no legacy one")
    return abis


def legacy_symbol(name, ordinal):
    return name if ordinal == 1 else f"{name}_v{ordinal}"


def rule_entries(name, per):
    """(name, version, variant, symbol by the rule) for one name's ABIs."""
    legacy = per[""]
    out = [(name, v, "", legacy_symbol(name, i + 1)) for i, v in enumerate(legacy)]
    for variant in ("ptds", "ptsz"):
        for v in per[variant]:
            base = [i for i, lv in enumerate(legacy) if lv <= v]
            if not base:
                raise GenError(f"PFN_{name}_v{v}_{variant}: no legacy ABI "
                               f"at or before {v}")
            out.append((name, v, variant,
                        f"{legacy_symbol(name, base[-1] + 1)}_{variant}"))
    return out


def build_table(abis, exports):
    """Apply rule and overrides; returns (entries, unmatched typedefs)."""
    exported = set(exports)
    entries, unmatched = [], []
    for name in sorted(abis):
        for key_name, version, variant, sym in rule_entries(name, abis[name]):
            key = (key_name, version, variant)
            sym = OVERRIDES.get(key, sym)
            if sym in exported:
                entries.append((key_name, version, variant, sym))
            else:
                suffix = f"_{variant}" if variant else ""
                unmatched.append(f"PFN_{key_name}_v{version}{suffix} -> {sym}")
    for (name, version, variant), sym in sorted(EXTRA_ENTRIES.items()):
        if sym not in exported:
            raise GenError(f"EXTRA_ENTRIES {name}@{version}: {sym} not exported")
        entries.append((name, version, variant, sym))
    entries.sort(key=lambda e: (e[0].encode(), e[1], e[2] != ""))
    check_unambiguous(entries)
    return entries, unmatched


def check_unambiguous(entries):
    """One symbol per (name, version, legacy/per-thread); one ABI per symbol."""
    seen, owner = set(), {}
    for name, version, variant, sym in entries:
        key = (name, version, variant != "")
        if key in seen:
            raise GenError(f"two entries for {name}@{version} {variant or 'legacy'}")
        seen.add(key)
        if sym in owner and owner[sym] != name:
            raise GenError(f"{sym} serves both {owner[sym]} and {name}")
        owner[sym] = name
    per_sym = {}
    for name, version, variant, sym in entries:
        per_sym.setdefault(sym, []).append(version)
    for sym, versions in per_sym.items():
        if len(versions) > 1:
            raise GenError(f"{sym} is reached from several typedefs "
                           f"({versions}): which version starts its ABI?")


def unreachable_exports(entries, exports, abis):
    """Exports no entry hands out, split into (known name, unknown name)."""
    reached = {e[3] for e in entries}
    known, unknown = [], []
    for sym in exports:
        if sym in reached:
            continue
        base = re.sub(r"(_v[0-9]+)?(_ptds|_ptsz)?$", "", sym)
        (known if base in abis else unknown).append(sym)
    return known, unknown


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(text)
    os.replace(tmp, path)


def map_text(exports):
    lines = ["/* Generated by gen_driver.py from libcuda.exports: do not edit.",
             " * NVIDIA's libcuda.so.1 has no symbol versions: one anonymous",
             " * version node exports these and adds no version. */",
             "{", "  global:"]
    lines += [f"    {s};" for s in exports]
    lines += ["  local: *;", "};", ""]
    return "\n".join(lines)


STUBS_HEAD = """\
/* Generated by gen_driver.py from libcuda.exports: do not edit.
 *
 * A weak stub for every symbol NVIDIA's libcuda.so.1 exports, so that no
 * program fails to load or to resolve a symbol. Strong definitions elsewhere
 * in the library replace them at link time; what is left answers through
 * flyt_driver_unsupported(), which says once which function was called and
 * returns CUDA_ERROR_NOT_SUPPORTED.
 *
 * Compile this in a translation unit of its own that does not include
 * cuda.h: the stubs are declared (void), which clashes with cuda.h's
 * prototypes, and cuda.h's macros (cuMemAlloc -> cuMemAlloc_v2) would rename
 * them. A C file holding only `#include "flyt_driver_stubs.inc"` is enough.
 */
#ifdef __cuda_cuda_h__
#error "flyt_driver_stubs.inc must be compiled without cuda.h"
#endif

/* GCC and Clang give cuda.h's enum CUresult (values 0..999) the compatible
 * type unsigned int, so this matches the caller's view of the result. */
typedef unsigned int CUresult;
CUresult flyt_driver_unsupported(const char *name);

#define FLYT_DRIVER_STUB(sym)                                              \\
    __attribute__((weak, visibility("default"))) CUresult sym(void)       \\
    {                                                                      \\
        return flyt_driver_unsupported(#sym);                              \\
    }

"""


def stubs_text(exports):
    body = "".join(f"FLYT_DRIVER_STUB({s})\n" for s in exports)
    return STUBS_HEAD + body + "\n#undef FLYT_DRIVER_STUB\n"


PROCS_HEAD = """\
/* Generated by gen_driver.py from libcuda.exports and the driver typedef
 * headers: do not edit. Included by procs.c after procs.h (and so after
 * cuda.h).
 *
 * Each implementing function is declared under a private C name bound to its
 * exported symbol with an asm label: a plain declaration would clash with
 * cuda.h's prototype, and cuda.h's macros (cuMemAlloc -> cuMemAlloc_v2)
 * would silently turn &cuMemAlloc into the address of another ABI.
 *
 * flyt_procs[] is sorted by name (strcmp order), then version, legacy before
 * per-thread, so lookups can binary-search. Fields: name asked for, CUDA
 * version from which the ABI applies, 1 for the _ptds/_ptsz per-thread
 * default stream variant, exported symbol, its address.
 *
"""


def report_lines(stats, unmatched, known, unknown):
    lines = [f"typedefs {stats['typedefs']}, names {stats['names']}, "
             f"exports {stats['exports']}, entries {stats['entries']} "
             f"({stats['per_thread']} per-thread), "
             f"unmatched typedefs {len(unmatched)}, "
             f"exports not reachable {len(known) + len(unknown)}"]
    lines += [f"unmatched typedef: {u}" for u in unmatched]
    lines += [f"not reachable (name has typedefs): {s}" for s in known]
    lines += [f"not reachable (no typedef for this name): {s}" for s in unknown]
    if OVERRIDES or EXTRA_ENTRIES:
        lines.append(f"overrides {len(OVERRIDES)}, extra entries {len(EXTRA_ENTRIES)}")
    return lines


def procs_text(entries, report):
    out = [PROCS_HEAD]
    out += [f" * {line}\n" for line in report]
    out.append(" */\n\n")
    for sym in sorted({e[3] for e in entries}):
        out.append(f'void flyt_proc_fn_{sym}(void) __asm__("{sym}");\n')
    out.append("\nstatic const struct flyt_proc flyt_procs[] = {\n")
    for name, version, variant, sym in entries:
        pt = 1 if variant else 0
        out.append(f'    {{ "{name}", {version}, {pt}, "{sym}", '
                   f"(void *)&flyt_proc_fn_{sym} }},\n")
    out.append("};\n")
    return "".join(out)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exports", required=True, help="libcuda.exports")
    p.add_argument("--typedefs", required=True, action="append",
                   help="a driver typedef header (repeat for each)")
    p.add_argument("--outdir", required=True)
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    exports = read_exports(args.exports)
    pfns = [t for h in args.typedefs for t in read_typedefs(h)]
    abis = group_abis(pfns)
    entries, unmatched = build_table(abis, exports)
    known, unknown = unreachable_exports(entries, exports, abis)
    stats = {"typedefs": len(pfns), "names": len(abis), "exports": len(exports),
             "entries": len(entries),
             "per_thread": sum(1 for e in entries if e[2])}
    report = report_lines(stats, unmatched, known, unknown)
    print("gen_driver: " + "\ngen_driver: ".join(report))
    if unmatched or known:
        # A typedef without its symbol, or a versioned export of a known name
        # that no typedef reaches, means the rule no longer fits the headers.
        raise GenError("the matching rule does not fit; see the lines above "
                       "and add explicit OVERRIDES if this is intended")
    os.makedirs(args.outdir, exist_ok=True)
    write(os.path.join(args.outdir, "libcuda.map"), map_text(exports))
    write(os.path.join(args.outdir, "flyt_driver_stubs.inc"), stubs_text(exports))
    write(os.path.join(args.outdir, "flyt_procs.inc"), procs_text(entries, report))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (GenError, OSError) as e:
        print(f"gen_driver: error: {e}", file=sys.stderr)
        sys.exit(1)
