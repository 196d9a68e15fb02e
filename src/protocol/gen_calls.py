#!/usr/bin/env python3
"""Generates everything the plain driver calls of calls.api need.

calls.api names each call once; NVIDIA's cudaTypedefs.h gives its
parameters (the typedef that implements the exported symbol, matched as
gen_driver.py matches them for cuGetProcAddress). Written into OUTDIR:

  flyt_calls.h        the call ids (wire format) and their count
  flyt_calls_desc.inc the server's table: name, parameter kinds, in/out sizes
  flyt_calls_cuda.inc the CUDA backend's dispatch (one case per call)
  flyt_calls_client.c the client's exported functions

usage: gen_calls.py --api calls.api --exports libcuda.exports
                    --typedefs cudaTypedefs.h [--typedefs ...] --outdir DIR
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client"))
import gen_driver  # noqa: E402  (the typedef-to-symbol matching, one copy of it)

MAX_ARGS = 8

# Handle types by their unversioned names; everything else scalar or pointer.
HANDLE_KINDS = {
    "CUstream": "STREAM",
    "CUevent": "EVENT",
    "CUfunction": "FUNC",
    "CUkernel": "FUNC",
    "CUdevice": "DEVICE",
    "CUcontext": "CTX",
    "CUdeviceptr": "DPTR",
    "CUgraph": "GRAPH",
    "CUgraphExec": "GEXEC",
    "CUgraphNode": "GNODE",
    "CUuserObject": "USEROBJ",
}
SCALAR_TYPES = {"int", "unsigned", "unsigned int", "size_t", "cuuint32_t", "cuuint64_t",
                "unsigned long long", "long long"}


class CallError(Exception):
    pass


def unversioned(type_name):
    return re.sub(r"_v[0-9]+$", "", type_name)


def read_api(path):
    calls, ids = [], set()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            mode, _, waits_if = words[2].partition("?") if len(words) > 2 else ("", "", "")
            if (len(words) < 3 or mode not in ("async", "sync") or not words[0].isdigit() or
                    (waits_if and (mode != "async" or not waits_if.isidentifier()))):
                raise CallError(f"{path}:{n}: want ID SYMBOL async|async?HOOK|sync [PARAM:in|out ...]")
            cid = int(words[0])
            if cid in ids or cid == 0:
                raise CallError(f"{path}:{n}: call id {cid} used twice or zero")
            ids.add(cid)
            dirs, void_types = {}, {}
            for w in words[3:]:
                name, _, d = w.partition(":")
                d, _, vtype = d.partition(":")
                if d not in ("in", "out"):
                    raise CallError(f"{path}:{n}: {w}: direction must be in or out")
                dirs[name] = d
                if vtype:
                    void_types[name] = vtype
            calls.append({"id": cid, "symbol": words[1], "async": mode == "async",
                          "waits_if": waits_if,
                          "dirs": dirs, "void_types": void_types, "where": f"{path}:{n}"})
    return calls


def read_typedef_params(paths):
    """PFN_ name -> parameter list text, from every typedef statement."""
    params = {}
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = gen_driver.strip_comments(f.read())
        for m in re.finditer(r"\(\s*CUDAAPI\s*\*\s*(PFN_\w+)\s*\)\s*\(([^;]*)\)\s*;", text):
            params[m.group(1)] = m.group(2)
    return params


def symbol_typedefs(typedef_paths, exports):
    """exported symbol -> PFN_ typedef name implementing it."""
    pfns = []
    for p in typedef_paths:
        pfns += gen_driver.read_typedefs(p)
    entries, _ = gen_driver.build_table(gen_driver.group_abis(pfns), exports)
    by_symbol = {}
    for name, version, variant, sym in entries:
        pfn = f"PFN_{name}_v{version}" + (f"_{variant}" if variant else "")
        by_symbol.setdefault(sym, pfn)
    return by_symbol


def parse_param(text, dirs, where, void_types=None):
    text = " ".join(text.split())
    m = re.match(r"^(.*?)(\**)\s*(\w+)$", text)
    if not m or not m.group(1).strip():
        raise CallError(f"{where}: cannot read parameter '{text}'")
    ctype, stars, name = m.group(1).strip(), m.group(2), m.group(3)
    pointer = ctype.endswith("*") or stars
    ctype = ctype.rstrip("* ").strip()
    base = unversioned(ctype.replace("const ", "").strip())
    if pointer:
        d = dirs.get(name)
        if d is None:
            raise CallError(f"{where}: pointer parameter {name} needs :in or :out")
        if "*" in ctype or (stars and len(stars) > 1):
            raise CallError(f"{where}: {name}: pointers to pointers are not plain")
        if base == "void" and (void_types or {}).get(name) in SCALAR_TYPES:
            # a void * the driver documents as pointing to one number
            pointee = ("const " if "const" in ctype else "") + void_types[name]
            return {"name": name, "kind": "IN" if d == "in" else "OUT", "pointee": pointee,
                    "declared": ctype}
        if base == "void" or (base in HANDLE_KINDS and base != "CUdeviceptr"):
            # the server's handles mean nothing in the client: hand-written
            raise CallError(f"{where}: {name}: a {base} cannot travel as plain bytes")
        return {"name": name, "kind": "IN" if d == "in" else "OUT", "pointee": ctype}
    if base in HANDLE_KINDS:
        return {"name": name, "kind": HANDLE_KINDS[base], "ctype": ctype}
    if base in SCALAR_TYPES or base.startswith("CU"):
        return {"name": name, "kind": "SCALAR", "ctype": ctype}
    raise CallError(f"{where}: {name}: type {ctype} is not a plain parameter")


def describe(call, by_symbol, params_text, exports):
    sym, where = call["symbol"], call["where"]
    if sym not in exports:
        raise CallError(f"{where}: {sym} is not a libcuda.so.1 export")
    pfn = by_symbol.get(sym)
    if pfn is None or pfn not in params_text:
        raise CallError(f"{where}: no typedef implements {sym}")
    text = params_text[pfn].strip()
    params = [] if text in ("", "void") else [parse_param(p, call["dirs"], where, call["void_types"])
                                              for p in text.split(",")]
    if len(params) > MAX_ARGS:
        raise CallError(f"{where}: {len(params)} parameters, at most {MAX_ARGS}")
    ins = [p for p in params if p["kind"] == "IN"]
    outs = [p for p in params if p["kind"] == "OUT"]
    if len(ins) > 1 or len(outs) > 1 or (outs and call["async"]):
        raise CallError(f"{where}: at most one in and one out pointer; out needs sync")
    unused = set(call["dirs"]) - {p["name"] for p in params}
    if unused:
        raise CallError(f"{where}: no parameter named {', '.join(sorted(unused))}")
    twins = [sym + s for s in ("_ptsz", "_ptds") if sym + s in exports]
    return dict(call, pfn=pfn, params=params, twin=twins[0] if twins else None)


# ---- writers ----

def header_text(calls):
    lines = ["/* generated by gen_calls.py from calls.api: do not edit */",
             "#ifndef FLYT_CALLS_H", "#define FLYT_CALLS_H", "",
             "/* Call ids of the CALL op: part of the wire format. */",
             "enum flyt_call_id {", "    FLYT_CALL_NONE = 0,"]
    lines += [f"    FLYT_CALL_{c['symbol']} = {c['id']}," for c in calls]
    top = max(c["id"] for c in calls)
    lines += ["};", f"#define FLYT_CALL_LIMIT {top + 1} /* ids are below this */", "", "#endif", ""]
    return "\n".join(lines)


def desc_text(calls):
    out = ["/* generated by gen_calls.py from calls.api: do not edit */"]
    for c in calls:
        kinds = ", ".join(f"FLYT_ARG_{p['kind']}" for p in c["params"]) or "0"
        size_in = next((f"sizeof({p['pointee']})" for p in c["params"] if p["kind"] == "IN"), "0")
        size_out = next((f"sizeof({p['pointee']})" for p in c["params"] if p["kind"] == "OUT"), "0")
        out.append(f"[FLYT_CALL_{c['symbol']}] = {{\"{c['symbol']}\", {len(c['params'])}, "
                   f"{{{kinds}}}, {size_in}, {size_out}, {int(c['async'])}}},")
    return "\n".join(out) + "\n"


def cuda_arg(p, i):
    k = p["kind"]
    if k == "STREAM":
        return f"flyt_cuda_enqueue(b, (flyt_bhandle)(uintptr_t)a[{i}])"
    if k == "EVENT":
        return f"(CUevent)(uintptr_t)a[{i}]"
    if k in ("GRAPH", "GEXEC", "GNODE", "USEROBJ"):
        return f"({p['ctype']})(uintptr_t)a[{i}]"
    if k == "FUNC":
        return f"flyt_cuda_func_handle((flyt_bhandle)(uintptr_t)a[{i}])"
    if k == "DEVICE":
        return "b->dev"
    if k == "CTX":
        return "b->ctx"
    if k == "DPTR":
        return f"(CUdeviceptr)a[{i}]"
    if k == "IN":
        return f"({p['pointee']} *)in"
    if k == "OUT":
        return f"({p['pointee']} *)out"
    return f"({p['ctype']})a[{i}]"


def cuda_text(calls):
    out = ["/* generated by gen_calls.py from calls.api: do not edit */"]
    for c in calls:
        args = ", ".join(cuda_arg(p, i) for i, p in enumerate(c["params"]))
        out.append(f"case FLYT_CALL_{c['symbol']}:")
        out.append(f"    return (({c['pfn']})fn)({args});")
    return "\n".join(out) + "\n"


def client_param(p):
    if p["kind"] in ("IN", "OUT"):
        return f"{p.get('declared', p['pointee'])} *{p['name']}"
    return f"{p['ctype']} {p['name']}"


def client_function(c, symbol, per_thread):
    params = c["params"]
    proto = ", ".join(client_param(p) for p in params) or "void"
    body = [f"FLYT_EXPORT CUresult {symbol}({proto})", "{",
            f"    struct flyt_generic_call call = {{.id = FLYT_CALL_{c['symbol']}, "
            f".async = {int(c['async'])}}};"]
    for i, p in enumerate(params):
        k, n = p["kind"], p["name"]
        if k == "STREAM":
            body.append(f"    call.args[{i}] = flyt_stream_wire({n}, {per_thread});")
        elif k == "FUNC":
            body.append(f"    if (flyt_call_func_arg(&call, {i}, {n}) != CUDA_SUCCESS)")
            body.append("        return call.result;")
        elif k in ("EVENT", "CTX", "GRAPH", "GEXEC", "GNODE", "USEROBJ"):
            body.append(f"    call.args[{i}] = (uint64_t)(uintptr_t){n};")
        elif k == "IN":
            body.append(f"    call.in = {n};")
            body.append(f"    call.in_size = sizeof({p['pointee']});")
        elif k == "OUT":
            body.append(f"    call.out = {n};")
            body.append(f"    call.out_size = sizeof({p['pointee']});")
        else:
            body.append(f"    call.args[{i}] = (uint64_t){n};")
    if c["waits_if"]:
        body.append(f"    call.async = !{c['waits_if']}(&call);")
    body += ["    return flyt_generic_call_send(&call);", "}", ""]
    return "\n".join(body)


def client_text(calls):
    out = ["/* generated by gen_calls.py from calls.api: do not edit */",
           '#include "client.h"', '#include "flyt_calls.h"', ""]
    for c in calls:
        out.append(client_function(c, c["symbol"], 0))
        if c["twin"]:
            out.append(client_function(c, c["twin"], 1))
    return "\n".join(out)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--api", required=True)
    ap.add_argument("--exports", required=True)
    ap.add_argument("--typedefs", action="append", required=True)
    ap.add_argument("--outdir", required=True)
    a = ap.parse_args(argv)
    try:
        exports = gen_driver.read_exports(a.exports)
        by_symbol = symbol_typedefs(a.typedefs, exports)
        params_text = read_typedef_params(a.typedefs)
        calls = [describe(c, by_symbol, params_text, set(exports)) for c in read_api(a.api)]
    except (CallError, gen_driver.GenError) as e:
        print(f"gen_calls.py: {e}", file=sys.stderr)
        return 1
    os.makedirs(a.outdir, exist_ok=True)
    files = {"flyt_calls.h": header_text(calls), "flyt_calls_desc.inc": desc_text(calls),
             "flyt_calls_cuda.inc": cuda_text(calls), "flyt_calls_client.c": client_text(calls)}
    for name, text in files.items():
        gen_driver.write(os.path.join(a.outdir, name), text)
    print(f"gen_calls.py: {len(calls)} plain calls, "
          f"{sum(1 for c in calls if c['twin'])} with per-thread twins")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
